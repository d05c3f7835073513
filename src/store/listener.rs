//! Announcements across processes (PostgreSQL `LISTEN`): jobs settled, and
//! API keys changed.
//!
//! The transaction that moves a job out of `pending`/`running` also sends
//! `NOTIFY intentgate_job_settled, '<job id>'` when a waiter of another
//! process marked the job `awaited` ([`Store::mark_awaited`]; the trigger
//! and why only then: migration 0005), so PostgreSQL delivers it exactly
//! when the settle commits. A
//! replica listens on one connection of its own, outside the pool (a
//! `LISTEN` connection is held for good; it must not starve the requests),
//! and wakes its local waiters on that job (`engine::Waiters`).
//!
//! Notifications sent while no connection listens are lost, so the caller
//! must re-read whatever it waits on after every (re)connect, and poll while
//! disconnected: [`ChangeFeed::next`] says when the connection is gone
//! rather than reconnecting silently as `PgListener::recv` would.
//!
//! A change to an API key is announced the same way, on its own channel
//! and connection, by the trigger on `key_audit` (migration 0007): every
//! replica's key cache drops the key named (`auth::feed`).

use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use uuid::Uuid;

use super::{DbError, Store, StoreError};

/// The channel the `jobs_notify_settled` trigger notifies on.
const SETTLED_CHANNEL: &str = "intentgate_job_settled";

/// The channel the `key_audit_notify` trigger notifies on.
const KEY_CHANNEL: &str = "intentgate_key_changed";

/// Connects listeners for one channel's announcements.
#[derive(Debug, Clone)]
pub struct ChangeListener {
    /// One connection at most, used only by the listener.
    pool: PgPool,
    channel: &'static str,
}

/// One live `LISTEN` connection.
pub struct ChangeFeed {
    listener: PgListener,
}

impl Store {
    /// A listener for job-settled announcements of other processes, on
    /// PostgreSQL; `None` on SQLite, whose single process wakes its waiters
    /// directly. Its connection is named `intentgate-listen <instance>` in
    /// `pg_stat_activity`, and goes to `[store] direct_url` when set: a
    /// pooler in transaction mode would hand the session that `LISTEN`s to
    /// other clients between transactions, and deliver nothing.
    pub fn settled_listener(&self, instance: &str) -> Option<ChangeListener> {
        self.listener(instance, "listen", SETTLED_CHANNEL)
    }

    /// A listener for API key changes, on PostgreSQL (its connection named
    /// `intentgate-keys <instance>`); `None` on SQLite, whose key cache
    /// reads the audit instead (`auth::feed`).
    pub fn key_listener(&self, instance: &str) -> Option<ChangeListener> {
        self.listener(instance, "keys", KEY_CHANNEL)
    }

    fn listener(&self, instance: &str, purpose: &str, channel: &'static str) -> Option<ChangeListener> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(store) => {
                let options = store
                    .session_options
                    .as_ref()
                    .clone()
                    .application_name(&format!("intentgate-{purpose} {instance}"));
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .min_connections(0)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .acquire_timeout(store.pool.options().get_acquire_timeout())
                    .connect_lazy_with(options);
                Some(ChangeListener { pool, channel })
            }
        }
    }
}

impl ChangeListener {
    /// Opens a connection and `LISTEN`s; from the moment this returns,
    /// every announcement that commits is delivered to the feed.
    pub async fn listen(&self) -> Result<ChangeFeed, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        // Our own pool, never closed while we listen.
        listener.ignore_pool_close_event(true);
        // A lost connection is reported (`next` errs), never healed in
        // silence: the caller re-reads what it waits on after reconnecting.
        listener.eager_reconnect(false);
        listener.listen(self.channel).await?;
        Ok(ChangeFeed { listener })
    }
}

impl ChangeFeed {
    /// The next announced id (a settled job's, a changed key's). `Err` when the connection was lost: drop
    /// the feed, and listen again.
    pub async fn next(&mut self) -> Result<Uuid, StoreError> {
        loop {
            match self.listener.try_recv().await? {
                None => {
                    return Err(StoreError::Unavailable(DbError::Listener("the LISTEN connection was lost")));
                }
                // Another application's payload on our channel is ignored.
                Some(notification) => {
                    if let Ok(id) = Uuid::parse_str(notification.payload()) {
                        return Ok(id);
                    }
                }
            }
        }
    }
}
