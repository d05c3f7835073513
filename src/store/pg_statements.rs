//! Taking a PostgreSQL connection for a statement or a transaction: the
//! two ways every PostgreSQL write and read starts, shared by the store's
//! files and the batch lanes.

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Postgres, Transaction};

/// A transaction on a connection of `pool`. sqlx's `acquire` future is
/// about 14 KB (it carries the connect path: socket, TLS, start-up), and a
/// future that awaits it inline keeps those bytes for its whole life: a
/// job read was 14.9 KB (672 bytes boxed) and a job's drive, which awaits
/// several store calls, 21.6 KB (7.2 KB), on either backend, since one
/// future type serves both. Boxed, the bytes exist only while a connection
/// is being taken (`tests/held_memory.rs`).
pub(super) async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    Box::pin(pool.begin()).await
}

/// A connection for one statement: the pool's as it is, or, through a
/// transaction pooler, inside a transaction of its own, so that the
/// statement's parse and its execution reach the same server connection.
/// Run the statement on [`OneStatement::conn`], then [`OneStatement::finish`].
pub(super) enum OneStatement {
    Plain(PoolConnection<Postgres>),
    Pinned(Transaction<'static, Postgres>),
}

impl OneStatement {
    pub(super) async fn begin(pool: &PgPool, transaction_pooling: bool) -> Result<Self, sqlx::Error> {
        Ok(if transaction_pooling {
            OneStatement::Pinned(begin(pool).await?)
        } else {
            // Boxed for the reason `begin` gives.
            OneStatement::Plain(Box::pin(pool.acquire()).await?)
        })
    }

    pub(super) fn conn(&mut self) -> &mut PgConnection {
        match self {
            OneStatement::Plain(connection) => connection,
            OneStatement::Pinned(transaction) => transaction,
        }
    }

    /// Commits the statement's transaction, if it has one. (Dropped
    /// instead, it is rolled back.)
    pub(super) async fn finish(self) -> Result<(), sqlx::Error> {
        match self {
            OneStatement::Plain(_) => Ok(()),
            OneStatement::Pinned(transaction) => transaction.commit().await,
        }
    }
}
