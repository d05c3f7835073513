//! One renewer for every lease this process holds (R10).
//!
//! A drive registers its job while it holds the lease ([`Engine::hold_lease`])
//! and one engine-wide task renews every registered lease each third of the
//! lease's lifetime. Most drives end within milliseconds, long before their
//! first renewal: registering is a map insert, where a renewer per job was a
//! task spawned, a timer armed and the task aborted, on every job.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use uuid::Uuid;

use super::Engine;
use crate::store::Lease;

/// The jobs whose lease this process holds and renews.
#[derive(Default)]
pub(super) struct HeldLeases {
    by_job: Mutex<HashMap<Uuid, Holding>>,
    /// The renewing task is started by the first registration (an engine
    /// that never drives starts none).
    started: AtomicBool,
}

#[derive(Debug, Clone, Copy)]
struct Holding {
    /// Drives of this job registered now (one, unless a drive that lost the
    /// lease overlaps the next one's).
    drives: usize,
    /// Another instance took the lease: no more renewals.
    lost: bool,
}

/// A drive's registration; dropping it (however the drive ends) stops the
/// renewals of its job.
pub(super) struct LeaseHeld<'a> {
    leases: &'a HeldLeases,
    job_id: Uuid,
}

impl HeldLeases {
    /// Whether a drive of this process holds the job's lease now.
    pub(super) fn holds(&self, job_id: Uuid) -> bool {
        self.by_job.lock().is_ok_and(|map| map.get(&job_id).is_some_and(|h| !h.lost))
    }
}

impl Drop for LeaseHeld<'_> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.leases.by_job.lock()
            && let Some(holding) = map.get_mut(&self.job_id)
        {
            holding.drives -= 1;
            if holding.drives == 0 {
                map.remove(&self.job_id);
            }
        }
    }
}

impl Engine {
    /// Renews the job's lease, which this drive has just claimed, until the
    /// returned registration is dropped.
    pub(super) fn hold_lease(&self, job_id: Uuid) -> LeaseHeld<'_> {
        let leases = &self.inner.leases;
        if let Ok(mut map) = leases.by_job.lock() {
            let holding = map.entry(job_id).or_insert(Holding { drives: 0, lost: false });
            holding.drives += 1;
            holding.lost = false;
        }
        if !leases.started.swap(true, Ordering::SeqCst) {
            let engine = self.clone();
            self.tasks().spawn_watch(async move { engine.renew_leases().await });
        }
        LeaseHeld { leases, job_id }
    }

    /// A held lease the store did not renew: the drive's own result released
    /// it (a job that ended between the tick and the drive's end), or another
    /// instance took it over. Either way renewals stop; only the second is
    /// worth a warning, so a job read tells them apart.
    async fn lease_not_renewed(&self, job_id: Uuid) {
        let still_held = match self.inner.leases.by_job.lock() {
            Ok(mut map) => map.get_mut(&job_id).map(|holding| holding.lost = true).is_some(),
            Err(_) => false,
        };
        if !still_held {
            return; // its drive ended meanwhile and let it go
        }
        match self.store().job(job_id).await {
            Ok(Some(job)) if job.status.is_terminal() => {
                tracing::debug!(%job_id, status = %job.status, "lease released with the job's end");
            }
            _ => tracing::warn!(%job_id, "lease lost to another instance"),
        }
    }

    /// Every `lease_ttl / 3`, renews every held lease (concurrently: on
    /// SQLite they share the writer's next commit). A lease claimed just
    /// before a tick is renewed early, never late: its first renewal comes
    /// within one period of the claim, well inside its lifetime.
    async fn renew_leases(&self) {
        let mut tick = tokio::time::interval(self.inner.lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate
        loop {
            tick.tick().await;
            let held: Vec<Uuid> = match self.inner.leases.by_job.lock() {
                Ok(map) => map.iter().filter(|(_, h)| !h.lost).map(|(id, _)| *id).collect(),
                Err(_) => Vec::new(),
            };
            if held.is_empty() {
                continue;
            }
            let expires_at_ms = self.lease_expiry();
            let renewals = held.iter().map(|&job_id| async move {
                let lease = Lease { owner: self.instance(), expires_at_ms };
                (job_id, self.store().renew_lease(job_id, lease).await)
            });
            for (job_id, renewed) in futures_util::future::join_all(renewals).await {
                match renewed {
                    Ok(true) => {}
                    Ok(false) => self.lease_not_renewed(job_id).await,
                    Err(err) => tracing::warn!(%job_id, error = %err, "cannot renew the lease"),
                }
            }
        }
    }
}
