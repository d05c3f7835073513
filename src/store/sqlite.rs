//! SQLite backend: the embedded default. One file, WAL journal, foreign
//! keys on. Writes go through ONE connection: SQLite has one writer at a
//! time anyway, and several writing connections only add busy-wait sleeps,
//! page-cache invalidation and starved WAL checkpoints (the benchmark saw
//! all three). Reads run on a pool of read-only connections beside it,
//! which WAL lets proceed while the writer writes.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::StoreError;
use crate::config::StoreConfig;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The writer: one connection.
    pub(super) pool: SqlitePool,
    /// Read-only connections, `[store] max_connections` of them.
    pub(super) readers: SqlitePool,
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
        if let Some(parent) = Path::new(options.get_filename()).parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|err| StoreError::Unavailable(sqlx::Error::Io(err)))?;
        }
        // The writer connects first: it creates the file and switches it to WAL.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(config.acquire_timeout.into())
            .connect_with(options.clone())
            .await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout.into())
            .connect_lazy_with(options.create_if_missing(false).read_only(true));
        Ok(SqliteStore { pool, readers })
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }
}
