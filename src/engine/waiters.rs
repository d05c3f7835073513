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
        let notify = self.register(job_id);
        let result = async {
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
        .await;
        self.unregister(job_id, notify);
        result
    }

    fn register(&self, job_id: Uuid) -> Arc<Notify> {
        match self.by_job.lock() {
            Ok(mut map) => map.entry(job_id).or_default().clone(),
            Err(_) => Arc::new(Notify::new()),
        }
    }

    fn unregister(&self, job_id: Uuid, notify: Arc<Notify>) {
        drop(notify);
        if let Ok(mut map) = self.by_job.lock()
            && map.get(&job_id).is_some_and(|n| Arc::strong_count(n) == 1)
        {
            map.remove(&job_id);
        }
    }
}
