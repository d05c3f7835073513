//! Provider health shared through the store: each change of a circuit this
//! replica makes is written for the others (`provider_circuits`), and what
//! the others changed is read every `POLL` and adopted (see `health.rs`).
//! A replica reads them all before it serves. When the store cannot be
//! reached each replica goes on with its own circuits.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::Engine;
use super::health::Change;
use crate::store::StoreError;

/// How often the others' changes are read.
const POLL: Duration = Duration::from_secs(1);
/// Changes are read again this far back: replicas' clocks differ a little,
/// and adopting a change twice changes nothing.
const SKEW_MS: i64 = 5_000;

/// The newest change read from the store.
#[derive(Debug, Default)]
pub(super) struct SharedSeen(AtomicI64);

impl Engine {
    /// Writes a change of `provider`'s circuit for the other replicas, in
    /// the background: the attempt that caused it does not wait.
    pub(super) fn share_circuit(&self, provider: &str, change: Change) {
        let shared = change.shared(provider, self.now_ms(), self.instance());
        let store = self.store().clone();
        self.tasks().spawn_watch(async move {
            if let Err(err) = store.record_circuit(&shared).await {
                tracing::debug!(provider = %shared.provider, error = %err, "circuit change not shared");
            }
        });
    }

    /// Reads the circuits changed since the last read and adopts what the
    /// other replicas changed.
    pub async fn read_shared_health(&self) -> Result<(), StoreError> {
        let seen = &self.inner.shared_seen.0;
        let after = seen.load(Ordering::Acquire).saturating_sub(SKEW_MS);
        for circuit in self.store().circuits_changed_after(after).await? {
            seen.fetch_max(circuit.changed_at, Ordering::AcqRel);
            if circuit.changed_by != self.instance() && self.inner.health.adopt(&circuit) {
                tracing::info!(provider = %circuit.provider, open_until = ?circuit.open_until,
                    replica = %circuit.changed_by, "provider health changed on another replica");
            }
        }
        Ok(())
    }

    /// Keeps the circuits in step with the other replicas, every `POLL`.
    pub fn spawn_health_feed(&self) {
        let engine = self.clone();
        self.tasks().spawn_poll(POLL, "shared provider health not read; going on with ours", move || {
            let engine = engine.clone();
            async move { engine.read_shared_health().await }
        });
    }
}
