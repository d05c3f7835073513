//! Keeps every replica's [`StoredKeys`] current: a change to a key made
//! anywhere — another replica, the CLI — drops it from this cache within a
//! second, with no reload.
//!
//! On PostgreSQL the `key_audit` trigger announces each change
//! (`NOTIFY intentgate_key_changed`, at its commit) and this LISTENs, as
//! job wake-ups do (`store::ChangeListener`); whenever the connection is
//! (re)made the whole cache is dropped, since announcements sent while
//! nobody listened are lost, and while it is down entries are trusted for
//! a second only. On SQLite the audit itself is the feed: its `seq` grows
//! in commit order, so reading the entries after the last one seen, every
//! [`POLL`], finds every change, the CLI's (another process) included.

use std::time::Duration;

use super::StoredKeys;
use crate::engine::Tasks;
use crate::store::ChangeListener;

/// How often SQLite's audit is read for changes.
const POLL: Duration = Duration::from_millis(250);
/// Audit entries read at a time.
const PAGE: i64 = 500;
/// The first pause before listening again after a failure; it doubles up
/// to [`MAX_PAUSE`] while the database stays away.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);

impl StoredKeys {
    /// Starts the task that keeps this cache current.
    pub fn spawn_feed(&self, tasks: &Tasks, instance: &str) {
        let keys = self.clone();
        match self.store().key_listener(instance) {
            Some(listener) => tasks.spawn_watch(async move { keys.listen(listener).await }),
            None => tasks.spawn_watch(async move { keys.poll_audit().await }),
        };
    }

    async fn listen(&self, listener: ChangeListener) {
        let mut pause = FIRST_PAUSE;
        loop {
            match listener.listen().await {
                Ok(mut feed) => {
                    self.forget_all();
                    self.set_fed(true);
                    pause = FIRST_PAUSE;
                    let lost = loop {
                        match feed.next().await {
                            Ok(key_id) => self.forget(key_id),
                            Err(err) => break err,
                        }
                    };
                    self.set_fed(false);
                    tracing::warn!(error = %lost, "stopped listening for key changes; cached keys are read again every second until it is back");
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for key changes; cached keys are read again every second meanwhile")
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    async fn poll_audit(&self) {
        let mut last_seq = None;
        loop {
            match self.read_changes(last_seq).await {
                Ok(seq) => {
                    last_seq = Some(seq);
                    self.set_fed(true);
                }
                Err(err) => {
                    self.set_fed(false);
                    tracing::warn!(error = %err, "cannot read key changes; cached keys are read again every second meanwhile");
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Forgets every key changed after `last_seq` (on the first read, none:
    /// the cache starts empty) and returns the last entry's `seq`.
    async fn read_changes(&self, last_seq: Option<i64>) -> Result<i64, crate::store::StoreError> {
        let mut seq = match last_seq {
            Some(seq) => seq,
            None => return self.store().key_audit_head().await,
        };
        loop {
            let entries = self.store().key_audit(seq, PAGE).await?;
            for entry in &entries {
                self.forget(entry.key_id);
                seq = entry.seq;
            }
            if entries.len() < PAGE as usize {
                return Ok(seq);
            }
        }
    }
}
