//! `Prefer: wait=N`: block a request until its job settles, woken by the
//! transition itself rather than by polling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use crate::jobs::{Job, JobStatus};
use crate::store::{Store, StoreError};

/// One `Notify` per job someone is waiting on. The engine calls
/// [`Waiters::notify`] after every job transition it makes.
///
/// In-process only: with several replicas on one PostgreSQL, a waiter on a
/// replica other than the driver's is woken by the short re-check below.
#[derive(Default)]
pub struct Waiters {
    by_job: Mutex<HashMap<Uuid, Arc<Notify>>>,
}

/// Upper bound between re-reads, so a transition made by another replica is
/// still seen.
const RECHECK: Duration = Duration::from_millis(500);

impl Waiters {
    pub fn notify(&self, job_id: Uuid) {
        let notify = self.by_job.lock().ok().and_then(|map| map.get(&job_id).cloned());
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    pub async fn wait_settled(
        &self,
        store: &Store,
        job_id: Uuid,
        timeout: Duration,
    ) -> Result<Option<Job>, StoreError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Unregisters however this ends, also when the request is dropped
        // (its client went away) in the middle of the wait.
        let registration = Registration { waiters: self, job_id, notify: self.register(job_id) };
        let notify = &registration.notify;
        async {
            loop {
                // Arm before reading, so a transition between the read and
                // the wait is not missed.
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let job = store.job(job_id).await?;
                match &job {
                    Some(job) if matches!(job.status, JobStatus::Pending | JobStatus::Running) => {}
                    _ => return Ok(job),
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(job);
                }
                let _ = tokio::time::timeout((deadline - now).min(RECHECK), notified).await;
            }
        }
        .await
    }

    fn register(&self, job_id: Uuid) -> Arc<Notify> {
        match self.by_job.lock() {
            Ok(mut map) => map.entry(job_id).or_default().clone(),
            Err(_) => Arc::new(Notify::new()),
        }
    }

    /// How many jobs have a waiter now (a leak shows here).
    pub fn watched(&self) -> usize {
        self.by_job.lock().map_or(0, |map| map.len())
    }
}

/// One waiter's place in [`Waiters`]; dropping it removes the job's entry
/// when it was the last waiter.
struct Registration<'a> {
    waiters: &'a Waiters,
    job_id: Uuid,
    notify: Arc<Notify>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Ok(mut map) = self.waiters.by_job.lock()
            && map.get(&self.job_id).is_some_and(|n| Arc::strong_count(n) == 2)
        {
            map.remove(&self.job_id);
        }
    }
}
