//! PostgreSQL backend: the shared store when several gateway replicas run
//! behind a load balancer.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::StoreError;
use super::pg_batches::PgBatches;
use crate::config::StoreConfig;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone)]
pub struct PostgresStore {
    pub(super) pool: PgPool,
    /// Job inserts and result CASes, batched across jobs.
    pub(super) batches: Arc<PgBatches>,
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
            .connect_lazy_with(options);
        let in_flight = (config.max_connections as usize / 4).max(1);
        let batches = Arc::new(PgBatches::spawn(&pool, in_flight));
        Ok(PostgresStore { pool, batches })
    }

    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }
}
