//! Durable storage of jobs and attempts, on SQLite (embedded default) or
//! PostgreSQL (shared by several gateway replicas).
//!
//! What passes through this seam: [`NewJob`]s in, [`Job`]s and [`Attempt`]s
//! out, and [`StoreError`]s that say whether the database was unreachable
//! (the API answers 503) or something else went wrong.
//!
//! The SQL both backends share lives once, in [`sql`], written with `$N`
//! placeholders that SQLite and PostgreSQL both accept, and a statement is
//! run by one call for both backends (`exec.rs`: [`Store::execute`],
//! `read_optional`, `read_all`). How it runs differs: on SQLite a read runs
//! on a read-only connection on the caller's thread (`sqlite_readers.rs`)
//! and a write is an op on the one writing connection: its own transaction
//! on the caller's thread when nothing else is writing, else in the writer
//! thread's next batch, which commits many at once (`sqlite_writer.rs`),
//! both binding the shared SQL through `sqlite_statements.rs`, its WAL
//! written a commit at a time (`sqlite_wal_vfs.rs`); on
//! PostgreSQL both run on the pool, and the two writes every job makes (its
//! insert, its result's CAS) go through batch lanes that write many jobs
//! per statement (`batch_lane.rs`, `pg_batches.rs`). The few
//! multi-statement writes (`start_attempt`, `complete_job`) keep their two bodies side by
//! side and share their decisions (`plan_start`). Connecting and migrations
//! live in `sqlite.rs` and `postgres.rs`, the invariants in
//! `migrations/sqlite/` and `migrations/postgres/`. Invariants are enforced
//! by the schema; the code never checks-then-inserts.

use crate::config::StoreConfig;
use crate::jobs::Job;

/// One store, dispatched by backend.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PostgresStore),
}

mod attempts;
mod batch_lane;
mod browse;
mod cas;
mod circuits;
mod contracts;
mod exec;
mod jobs;
mod keys;
mod meters;
mod pg_batches;
mod pg_statements;
mod postgres;
mod rows;
mod spend_limits;
mod sql;
mod sqlite;
mod sqlite_files;
mod sqlite_migrate;
mod sqlite_readers;
mod sqlite_statements;
mod sqlite_wal_vfs;
mod sqlite_writer;
// Last, apart from the list above (the budgets branch adds to it).
mod listener;

// Cross-process announcements (PostgreSQL LISTEN/NOTIFY).
pub use listener::{ChangeFeed, ChangeListener};

pub use attempts::{Settle, StartOutcome};
pub use browse::{JobQuery, JobSummary, MinuteCount, UnknownAttempt};
pub use cas::CasOutcome;
pub use circuits::SharedCircuit;
pub use contracts::{CaseRecord, ContractRecord};
pub use jobs::{JobFilter, Lease};
pub use meters::{MeterReading, Reservation};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached right now; retrying later may work.
    #[error("the job store is unavailable: {0}")]
    Unavailable(#[source] DbError),
    /// A row that the schema should have made impossible.
    #[error("the job store holds an invalid row: {0}")]
    Corrupt(String),
    #[error("job store error: {0}")]
    Database(#[source] DbError),
    #[error("cannot migrate the job store: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}

/// The driver-level error under a [`StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlx(sqlx::Error),
    #[error(transparent)]
    Sqlite(rusqlite::Error),
    /// The SQLite writer could not run or commit an op (on its thread or inline).
    #[error("{0}")]
    Writer(String),
    /// The PostgreSQL connection that LISTENs for settled jobs.
    #[error("{0}")]
    Listener(&'static str),
    /// A batch of writes (`pg_batches.rs`) failed as a whole: every item
    /// of it gets this, the first one the driver's own error.
    #[error("{0}")]
    Batch(String),
    /// Why no connection could be made, found out at start-up.
    #[error("{0}")]
    Connect(String),
}

impl DbError {
    fn provably_not_committed(&self) -> bool {
        match self {
            DbError::Sqlx(err) => match err {
                sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => true,
                sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
                // The server answered with an error: what it was asked did
                // not commit.
                sqlx::Error::Database(_) => true,
                _ => false,
            },
            DbError::Sqlite(_) | DbError::Writer(_) | DbError::Listener(_) | DbError::Connect(_) => true,
            DbError::Batch(_) => false,
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        match err {
            sqlx::migrate::MigrateError::Execute(inner) if is_unavailable(&inner) => {
                StoreError::Unavailable(DbError::Sqlx(inner))
            }
            other => StoreError::Migrate(other),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if is_unavailable(&err) {
            StoreError::Unavailable(DbError::Sqlx(err))
        } else {
            StoreError::Database(DbError::Sqlx(err))
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let unavailable = matches!(
            err.sqlite_error_code(),
            Some(
                ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::CannotOpen
                    | ErrorCode::DiskFull
                    | ErrorCode::SystemIoFailure
            )
        );
        if unavailable {
            StoreError::Unavailable(DbError::Sqlite(err))
        } else {
            StoreError::Database(DbError::Sqlite(err))
        }
    }
}

impl StoreError {
    /// Whether a write that failed with this error provably did not commit:
    /// it never reached the database (no connection could be had or made),
    /// the database itself refused a statement (its transaction rolled
    /// back), or the store is SQLite, whose commit is a local call that
    /// either happened or did not. Anything else — a connection that broke
    /// while a statement or its commit was in flight, a batch that failed
    /// as a whole — may have landed, and the caller must say so.
    pub fn provably_not_committed(&self) -> bool {
        match self {
            StoreError::Unavailable(db) | StoreError::Database(db) => db.provably_not_committed(),
            // A row read back that the schema should have made impossible:
            // the write before it may well have landed.
            StoreError::Corrupt(_) => false,
            StoreError::Migrate(_) => true,
        }
    }

    /// A UNIQUE or PRIMARY KEY constraint refused the write.
    fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Database(DbError::Sqlx(sqlx::Error::Database(db))) => db.is_unique_violation(),
            StoreError::Database(DbError::Sqlite(err)) => matches!(
                err.sqlite_error(),
                Some(e) if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            ),
            _ => false,
        }
    }
}

/// Errors that mean "the database is not there right now" rather than "this
/// statement is wrong": the caller gets 503 and may retry.
fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // A connection closed before the server answered the TLS request
        // (`sslmode=prefer`, the default, asks first): the driver reads no
        // byte and reports it as a protocol error, but the database is just
        // gone, exactly as an `Io` error would say without TLS.
        sqlx::Error::Protocol(message) => message.starts_with("unexpected response from SSLRequest: 0x00"),
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // PostgreSQL: class 08 connection exception, 57P0x shutdown,
            // 53300 too many connections. SQLite: 5 BUSY, 6 LOCKED.
            code.starts_with("08")
                || code.starts_with("57P0")
                || code == "53300"
                || code == "5"
                || code == "6"
        }
        _ => false,
    }
}

/// Result of an insert-or-get keyed by `(owner, idempotency_key)` (R2).
#[derive(Debug, Clone)]
pub enum Created {
    /// This call inserted the row: `running` with its attempt 1 `starting`
    /// when one was asked for, else `pending`.
    New(Job, Option<Box<crate::jobs::Attempt>>),
    /// The row already existed; the constraint said so, not a prior read.
    Existing(Job),
    /// A budget or rate limit refused the new job; nothing was written.
    Refused(crate::budgets::LimitRefusal),
}

impl Store {
    /// Connects to the configured database (lazily for PostgreSQL, so a
    /// gateway can start while its database is still coming up).
    pub async fn connect(config: &StoreConfig) -> Result<Store, StoreError> {
        if config.url.starts_with("sqlite:") {
            Ok(Store::Sqlite(sqlite::SqliteStore::connect(config).await?))
        } else {
            Ok(Store::Postgres(postgres::PostgresStore::connect(config)?))
        }
    }

    /// What a new attempt's `sent` column starts as: not yet sent, or (with
    /// `[store] record_sends` off) NULL, not recorded — never "not yet
    /// sent" for an attempt no one will mark, which recovery would send
    /// again.
    pub(super) fn unsent(&self) -> Option<bool> {
        let recorded = match self {
            Store::Sqlite(store) => store.record_sends,
            Store::Postgres(store) => store.record_sends,
        };
        recorded.then_some(false)
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    /// Applies the backend's migrations; safe to run on every start.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => store.migrate().await,
            Store::Postgres(store) => store.migrate().await,
        }
    }

    /// Answers when the database answers (`/readyz`); on SQLite, when the
    /// writer thread answers too (reads and writes use other connections).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.read_optional("SELECT 1", vec![], rows::first::<i32>).await?;
        if let Store::Sqlite(store) = self {
            store.check_writer().await?;
        }
        Ok(())
    }
}
