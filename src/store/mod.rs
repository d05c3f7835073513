//! Durable storage of jobs and attempts, on SQLite (embedded default) or
//! PostgreSQL (shared by several gateway replicas).
//!
//! What passes through this seam: [`NewJob`]s in, [`Job`]s and [`Attempt`]s
//! out, and [`StoreError`]s that say whether the database was unreachable
//! (the API answers 503) or something else went wrong.
//!
//! The SQL both backends share lives once, in [`sql`], written with `$N`
//! placeholders that SQLite and PostgreSQL both accept; [`on_pool!`] runs one
//! body against whichever pool is configured, type-checked per backend. What
//! differs per backend (connecting, migrations, how a write transaction
//! begins) lives side by side in `sqlite.rs` and `postgres.rs`, as the
//! invariants do in `migrations/sqlite/` and `migrations/postgres/`.
//! Invariants are enforced by the schema; the code never checks-then-inserts.

use crate::config::StoreConfig;
use crate::jobs::Job;

/// One store, dispatched by backend.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PostgresStore),
}

/// Runs `$body` with `$pool` bound to the configured backend's pool.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite(store) => {
                let $pool = &store.pool;
                $body
            }
            Store::Postgres(store) => {
                let $pool = &store.pool;
                $body
            }
        }
    };
}

/// Like [`on_pool!`], for statements that only read: on SQLite they run on
/// the read-only connections, beside the single writer.
macro_rules! on_reader {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite(store) => {
                let $pool = &store.readers;
                $body
            }
            Store::Postgres(store) => {
                let $pool = &store.pool;
                $body
            }
        }
    };
}

/// Runs `$body` inside a write transaction, `$tx` bound to it, and commits.
/// SQLite begins with `BEGIN IMMEDIATE` so the write lock is taken before
/// the first read (no upgrade deadlock); PostgreSQL's default suffices
/// because the constraints, not the reads, decide races. An early `return`
/// or `?` in the body drops the transaction, which rolls it back.
macro_rules! in_write_tx {
    ($store:expr, $tx:ident => $body:block) => {
        match $store {
            Store::Sqlite(store) => {
                let mut $tx = store.pool.begin_with("BEGIN IMMEDIATE").await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
            Store::Postgres(store) => {
                let mut $tx = store.pool.begin().await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
        }
    };
}

mod attempts;
mod contracts;
mod jobs;
mod postgres;
mod rows;
mod sql;
mod sqlite;

pub use attempts::{CasOutcome, Settle, StartOutcome};
pub use contracts::{CaseRecord, ContractRecord};
pub use jobs::{JobFilter, Lease};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached right now; retrying later may work.
    #[error("the job store is unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A row that the schema should have made impossible.
    #[error("the job store holds an invalid row: {0}")]
    Corrupt(String),
    #[error("job store error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("cannot migrate the job store: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        match err {
            sqlx::migrate::MigrateError::Execute(inner) if is_unavailable(&inner) => {
                StoreError::Unavailable(inner)
            }
            other => StoreError::Migrate(other),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if is_unavailable(&err) { StoreError::Unavailable(err) } else { StoreError::Database(err) }
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
    /// This call inserted the row.
    New(Job),
    /// The row already existed; the constraint said so, not a prior read.
    Existing(Job),
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

    /// Answers when the database answers (`/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        on_reader!(self, pool => sqlx::query("SELECT 1").execute(pool).await.map(drop))?;
        Ok(())
    }
}
