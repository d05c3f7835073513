//! SQLite backend: the embedded default. One file, WAL journal, foreign
//! keys on. Writes go through ONE connection, on its own thread, which
//! commits them in groups, or on the caller's when it is idle ([`Writer`]):
//! SQLite has one writer at a time anyway, and several writing connections
//! only add busy-wait sleeps, page-cache invalidation and starved WAL
//! checkpoints (the benchmark saw all three). Reads run on read-only connections beside it, on the
//! caller's thread ([`Readers`]), which WAL lets proceed while the writer
//! writes.

use std::path::Path;
use std::str::FromStr;

use sqlx::Connection as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};

use super::sqlite_readers::Readers;
use super::sqlite_writer::{Writer, WriterOptions};
use super::{DbError, StoreError};
use crate::config::StoreConfig;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The writer: one connection, one thread (idle writes run inline).
    pub(super) writer: Writer,
    /// How to connect for migrations (which sqlx runs, before any write).
    options: std::sync::Arc<SqliteConnectOptions>,
    /// Read-only connections, up to `[store] max_connections` kept open.
    pub(super) readers: std::sync::Arc<Readers>,
    /// How long `/readyz` waits for the writer (`[store] acquire_timeout`:
    /// the writer is the one connection a write waits for).
    ready_timeout: std::time::Duration,
}

impl SqliteStore {
    pub(super) async fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(&config.url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode survives a process crash; FULL also survives
            // power loss at the cost of an fsync per commit.
            .synchronous(match config.sqlite_synchronous {
                crate::config::SqliteSynchronous::Normal => SqliteSynchronous::Normal,
                crate::config::SqliteSynchronous::Full => SqliteSynchronous::Full,
            })
            .busy_timeout(config.busy_timeout.into())
            .foreign_keys(true);
        // Directory 0700, file 0600 (and so its -wal and -shm) before
        // SQLite creates anything.
        super::sqlite_files::prepare(Path::new(options.get_filename()))
            .map_err(|err| StoreError::Unavailable(DbError::Sqlx(sqlx::Error::Io(err))))?;
        // The writer opens first: it creates the file and switches it to WAL.
        let writer = Writer::open(&WriterOptions {
            path: options.get_filename().to_path_buf(),
            synchronous: match config.sqlite_synchronous {
                crate::config::SqliteSynchronous::Normal => "NORMAL",
                crate::config::SqliteSynchronous::Full => "FULL",
            },
            busy_timeout: config.busy_timeout.into(),
        })?;
        let readers = Readers::new(
            options.get_filename().to_path_buf(),
            config.busy_timeout.into(),
            config.max_connections as usize,
        );
        Ok(SqliteStore {
            writer,
            options: std::sync::Arc::new(options),
            readers: std::sync::Arc::new(readers),
            ready_timeout: config.acquire_timeout.into(),
        })
    }

    /// Answers when the writer thread does: a reader that answers says
    /// nothing about the writer, through which every write goes.
    pub(super) async fn check_writer(&self) -> Result<(), StoreError> {
        self.writer.check(self.ready_timeout).await
    }

    /// Runs sqlx's migrations on a connection of their own, closed after.
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = SqliteConnection::connect_with(&self.options).await?;
        MIGRATOR.run(&mut conn).await?;
        conn.close().await?;
        Ok(())
    }
}
