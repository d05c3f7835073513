//! PostgreSQL backend: the shared store when several gateway replicas run
//! behind a load balancer.
//!
//! Through a pooler in transaction mode (`[store] transaction_pooling`,
//! PgBouncer's `pool_mode = transaction`) a client connection is paired
//! with a server connection for one transaction at a time, and between two
//! transactions it may be paired with another. What sqlx does by default
//! breaks there, in two ways:
//!
//! - It names a statement (`sqlx_s_1`, …) on its connection and reuses the
//!   name — even with its statement cache off, it only stops reusing it. On
//!   the next server connection the name is missing ("prepared statement
//!   does not exist") or another client's ("already exists"). So no
//!   statement is named ([`PostgresStore::named`]: sqlx's `persistent`).
//! - Even unnamed, a statement with arguments takes two exchanges, each
//!   ending in a `Sync`: the parse (and its description), then the bind
//!   and execute. Outside a transaction the pooler may hand the connection
//!   to another client between them, and the bind finds no statement. So a
//!   lone statement runs inside a transaction of its own
//!   ([`OneStatement`]); the transactions the store opens anyway keep their
//!   server connection to their end.
//!
//! What needs a session — `LISTEN` (`listener.rs`) and the migrations,
//! which hold an advisory lock — connects to `[store] direct_url`, the
//! database itself.

use std::str::FromStr;
use std::sync::Arc;

use std::time::Duration;

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use super::pg_batches::PgBatches;
use super::pg_statements::OneStatement;
use super::{DbError, StoreError};
use crate::config::StoreConfig;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(super) pool: PgPool,
    /// Job inserts and result CASes, batched across jobs.
    pub(super) batches: Arc<PgBatches>,
    /// `[store] direct_url` (else `url`): for `LISTEN` and the migrations,
    /// and to explain a failure to connect ([`PostgresStore::explain`]).
    pub(super) session_options: Box<PgConnectOptions>,
    /// `[store] transaction_pooling`.
    transaction_pooling: bool,
    acquire_timeout: Duration,
    /// `[store] record_sends`.
    pub(super) record_sends: bool,
}

impl PostgresStore {
    /// Lazy: no connection is made until the first query, so the gateway
    /// starts (and answers 503) while the database is away. Must run on a
    /// tokio runtime (the batch lanes are tasks on it).
    ///
    /// Each batch lane may use a quarter of the pool at once, so that the
    /// two lanes leave half of it to reads, attempts and the sweep.
    pub(super) fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        let mut options = PgConnectOptions::from_str(&config.url)?;
        if config.transaction_pooling {
            // A startup parameter PgBouncer does not know is refused
            // (unless its `ignore_startup_parameters` lists it), and this
            // one matters only to floats sent as text: the store sends
            // none, and reads every result in binary.
            options = options.extra_float_digits(None);
        }
        let session_options = match &config.direct_url {
            Some(url) => PgConnectOptions::from_str(url)?,
            None => options.clone(),
        };
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout.into())
            .connect_lazy_with(options);
        let in_flight = (config.max_connections as usize / 4).max(1);
        let transaction_pooling = config.transaction_pooling;
        let batches = Arc::new(PgBatches::spawn(&pool, in_flight, transaction_pooling));
        let acquire_timeout = config.acquire_timeout.into();
        Ok(PostgresStore {
            pool,
            batches,
            session_options: Box::new(session_options),
            transaction_pooling,
            acquire_timeout,
            record_sends: config.record_sends,
        })
    }

    /// Whether a statement may be named on its connection and kept there
    /// (sqlx's `persistent`, its default): not through a transaction pooler.
    pub(super) fn named(&self) -> bool {
        !self.transaction_pooling
    }

    /// A connection to run one statement on (see [`OneStatement`]).
    pub(super) async fn one_statement(&self) -> Result<OneStatement, sqlx::Error> {
        OneStatement::begin(&self.pool, self.transaction_pooling).await
    }

    /// On one connection of its own to the database itself (`direct_url`):
    /// the migrator holds an advisory lock for the session, which a pooler
    /// in transaction mode would not keep.
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let connected =
            tokio::time::timeout(self.acquire_timeout, PgConnection::connect_with(&self.session_options))
                .await;
        let mut connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(err)) => return Err(self.explain(err.into(), &self.session_options).await),
            Err(_) => {
                let why = format!("{} did not answer within acquire_timeout", target(&self.session_options));
                return Err(StoreError::Unavailable(DbError::Connect(why)));
            }
        };
        let migrated = MIGRATOR.run(&mut connection).await;
        let _ = connection.close().await;
        match migrated {
            Ok(()) => Ok(()),
            Err(err) => Err(self.explain(err.into(), &self.session_options).await),
        }
    }

    /// The start-up failure as what happened. A pool that cannot connect
    /// only says that it timed out, and a migration error names a line of
    /// the migrator; one direct connection says why ("connection refused",
    /// "database \"x\" does not exist", an authentication failure).
    async fn explain(&self, err: StoreError, options: &PgConnectOptions) -> StoreError {
        let target = target(options);
        let tried = tokio::time::timeout(self.acquire_timeout, PgConnection::connect_with(options)).await;
        let why = match tried {
            Ok(Ok(connection)) => {
                let _ = connection.close().await;
                return err; // it connects: the error was not about connecting
            }
            Ok(Err(sqlx::Error::Database(db))) => {
                format!("{target} refused the connection: {}", db.message())
            }
            Ok(Err(sqlx::Error::Io(io))) => format!("cannot connect to {target}: {io}"),
            Ok(Err(other)) => format!("cannot connect to {target}: {other}"),
            Err(_) => format!("{target} did not answer within acquire_timeout"),
        };
        StoreError::Unavailable(DbError::Connect(why))
    }
}

fn target(options: &PgConnectOptions) -> String {
    format!("PostgreSQL at {}:{}", options.get_host(), options.get_port())
}
