//! PostgreSQL backend: the shared store when several gateway replicas run
//! behind a load balancer.

use std::str::FromStr;
use std::sync::Arc;

use std::time::Duration;

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use super::pg_batches::PgBatches;
use super::{DbError, StoreError};
use crate::config::StoreConfig;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(super) pool: PgPool,
    /// Job inserts and result CASes, batched across jobs.
    pub(super) batches: Arc<PgBatches>,
    /// Kept to explain a failure to connect (see [`PostgresStore::explain`]).
    options: Box<PgConnectOptions>,
    acquire_timeout: Duration,
}

impl PostgresStore {
    /// Lazy: no connection is made until the first query, so the gateway
    /// starts (and answers 503) while the database is away. Must run on a
    /// tokio runtime (the batch lanes are tasks on it).
    ///
    /// Each batch lane may use a quarter of the pool at once, so that the
    /// two lanes leave half of it to reads, attempts and the sweep.
    pub(super) fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(&config.url)?;
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(config.acquire_timeout.into())
            .connect_lazy_with(options.clone());
        let in_flight = (config.max_connections as usize / 4).max(1);
        let batches = Arc::new(PgBatches::spawn(&pool, in_flight));
        let acquire_timeout = config.acquire_timeout.into();
        Ok(PostgresStore { pool, batches, options: Box::new(options), acquire_timeout })
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        match MIGRATOR.run(&self.pool).await {
            Ok(()) => Ok(()),
            Err(err) => Err(self.explain(err.into()).await),
        }
    }

    /// The start-up failure as what happened. A pool that cannot connect
    /// only says that it timed out, and a migration error names a line of
    /// the migrator; one direct connection says why ("connection refused",
    /// "database \"x\" does not exist", an authentication failure).
    async fn explain(&self, err: StoreError) -> StoreError {
        let target = format!("PostgreSQL at {}:{}", self.options.get_host(), self.options.get_port());
        let tried =
            tokio::time::timeout(self.acquire_timeout, PgConnection::connect_with(&self.options)).await;
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
