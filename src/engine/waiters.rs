//! `Prefer: wait=N`: block a request until its job settles, woken by the
//! transition itself rather than by polling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::jobs::{Job, JobStatus};
use crate::store::{Store, StoreError};

/// One `Notify` per job someone is waiting on. The engine calls
/// [`Waiters::notify`] after every job transition it makes; on PostgreSQL
/// the settled-job listener (`remote.rs`) calls it for the transitions of
/// other processes too.
///
/// While that listener is not connected (SQLite has none; PostgreSQL
/// between a lost connection and the next `LISTEN`), a transition made by
/// another process is seen by the short re-read below.
#[derive(Default)]
pub struct Waiters {
    by_job: Mutex<HashMap<Uuid, Arc<Notify>>>,
    /// `Some(n)` while the transitions of other processes are announced,
    /// `n` counting the listener's connections so far; `None` while they
    /// are not. Waiters re-read only as a backstop while it is `Some`.
    announced: watch::Sender<Option<u64>>,
}

/// Upper bound between re-reads while another process's transition would
/// not be announced, so that it is still seen.
const RECHECK: Duration = Duration::from_millis(500);

/// Upper bound between re-reads while every transition is announced: a
/// backstop for an announcement lost with a connection nobody noticed yet.
const RECHECK_ANNOUNCED: Duration = Duration::from_secs(5);

impl Waiters {
    pub fn notify(&self, job_id: Uuid) {
        let notify = self.by_job.lock().ok().and_then(|map| map.get(&job_id).cloned());
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// Says whether the transitions of other processes are announced from
    /// now on (`Some(connection number)`), and wakes every waiter to
    /// re-read: whatever settled while nobody listened was never announced,
    /// and a waiter that relied on announcements must go back to polling.
    pub fn set_announced(&self, announced: Option<u64>) {
        self.announced.send_replace(announced);
        let all: Vec<Arc<Notify>> =
            self.by_job.lock().map(|map| map.values().cloned().collect()).unwrap_or_default();
        for notify in all {
            notify.notify_waiters();
        }
    }

    /// Waits until the job is no longer `pending` or `running`, or
    /// `timeout` passed; `None` if it does not exist. `mark` asks for the
    /// job's settle to be announced to this process (see `remote.rs`) and
    /// says whether it will be; it is called only while announcements are
    /// received, and until it says yes.
    pub async fn wait_settled<M, F>(
        &self,
        store: &Store,
        job_id: Uuid,
        timeout: Duration,
        mark: M,
    ) -> Result<Option<Job>, StoreError>
    where
        M: Fn() -> F,
        F: Future<Output = Result<bool, StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        // Unregisters however this ends, also when the request is dropped
        // (its client went away) in the middle of the wait.
        let registration = Registration { waiters: self, job_id, notify: self.register(job_id) };
        let notify = &registration.notify;
        let mut marked = false;
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
                // Read after arming: a change of mode wakes us (see
                // `set_announced`), so this choice is never stale for long.
                let announced = self.announced.borrow().is_some();
                if announced && !marked {
                    marked = mark().await?;
                }
                let recheck = if announced && marked { RECHECK_ANNOUNCED } else { RECHECK };
                let _ = tokio::time::timeout((deadline - now).min(recheck), notified).await;
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

    /// Follows whether other processes' transitions are announced (see
    /// `announced`).
    pub fn announcements(&self) -> watch::Receiver<Option<u64>> {
        self.announced.subscribe()
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
