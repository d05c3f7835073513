//! Supervised background work: every task the engine starts is tracked, so
//! that a graceful shutdown can wait for it, and none outlives the engine
//! unnoticed.
//!
//! Three kinds of work:
//! - **drives** (a job being taken through its chain, an answer being
//!   recorded) and
//! - **listeners** (an `unknown` attempt's call, still waited on for its
//!   late answer): on shutdown both are drained, up to a bound. A listener
//!   matters as much as a drive: its answer, if it comes, is the job's
//!   result; stopped, the attempt would be abandoned at `max_execution` and
//!   the chain would run the intent again elsewhere.
//! - **watches** (the lease renewer, the settled-job listener, the sweep,
//!   provider calls): they serve the others, so they run on through the
//!   drain (leases stay renewed) and are stopped after it.
//!
//! What is still open at the bound is the recovery sweep's to settle, on
//! another replica or this instance's next start: leases expire, `starting`
//! attempts become `unknown`, `max_execution` abandons. Each listener cut
//! that way is logged with the attempt it was waiting for.
//!
//! The work is boxed before it is wrapped for cancellation. The block
//! that spawns it and `run_until_cancelled` each keep room for the future
//! they await beside the one they were given, so a drive's task was three
//! times the size of the drive (a held stream carried 22 KB of task for a
//! 7 KB drive, every byte of it copied at spawn). Boxed, the task holds a
//! pointer and the drive exists once.
//!
//! This is the one place that calls `tokio::spawn` (clippy's
//! `disallowed_methods` refuses it elsewhere in the crate).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone, Default)]
pub struct Tasks {
    drives: TaskTracker,
    listeners: TaskTracker,
    watches: TaskTracker,
    /// Cancelled when the drain is over.
    stop: CancellationToken,
    /// What each running listener waits for, by a number of its own (for
    /// the log line of a listener the drain's bound cuts).
    waiting: Arc<Mutex<BTreeMap<u64, String>>>,
    next_listener: Arc<AtomicU64>,
    /// Set when shutdown begins: `/readyz` answers 503 from then on.
    draining: Arc<AtomicBool>,
}

/// What a shutdown left behind: drives and listeners still running at the
/// drain's bound (each listener as what it waited for).
#[derive(Debug, Default)]
pub struct Drained {
    pub drives_cut: usize,
    pub listeners_cut: Vec<String>,
}

/// `work` until `stop` is cancelled, boxed once (see the module's doc).
fn until_stopped<F: Future>(stop: CancellationToken, work: F) -> impl Future<Output = Option<F::Output>> {
    let work = Box::pin(work);
    async move { stop.run_until_cancelled(work).await }
}

impl Tasks {
    /// Work that should finish before the process exits. A drive and a
    /// listener stay in the trace of the span that spawned them.
    pub fn spawn_drive<F>(&self, work: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.drives.spawn(until_stopped(self.stop.clone(), crate::traces::carry(work)))
    }

    /// A late-answer listener, waiting for `what` (e.g. "attempt 2 of job
    /// …"): drained on shutdown like a drive.
    pub fn spawn_listener<F>(&self, what: String, work: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        let waiting = self.waiting.clone();
        let work = until_stopped(self.stop.clone(), crate::traces::carry(work));
        waiting.lock().unwrap_or_else(PoisonError::into_inner).insert(id, what);
        self.listeners.spawn(async move {
            let out = work.await;
            waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            out
        })
    }

    /// CPU-bound work a request awaits (a token count), on tokio's blocking
    /// pool so that no async worker is held by it. Tracked as a drive, so
    /// shutdown waits for it; it cannot be stopped midway, so it must be
    /// bounded work.
    pub fn spawn_blocking<F, T>(&self, work: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.drives.spawn_blocking(work)
    }

    /// Work that may wait long and serves the others: it runs on through
    /// the drain and is stopped once the drain is over.
    pub fn spawn_watch<F>(&self, work: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.watches.spawn(until_stopped(self.stop.clone(), work))
    }

    /// A watch that runs `poll` every `period` (the first at once), and logs
    /// a failure as `what` went wrong; the next tick tries again.
    pub fn spawn_poll<P, Fut, E>(&self, period: std::time::Duration, what: &'static str, mut poll: P)
    where
        P: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send,
        E: std::fmt::Display,
    {
        self.spawn_watch(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(err) = poll().await {
                    tracing::debug!(error = %err, "{what}");
                }
            }
        });
    }

    /// Shutdown has begun (or is about to): not ready any more.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// How many tasks of each kind are running: `(drives, listeners, watches)`.
    pub fn running(&self) -> (usize, usize, usize) {
        (self.drives.len(), self.listeners.len(), self.watches.len())
    }

    /// Drains: waits up to `bound` for the drives and the listeners to end
    /// (the watches they use run on meanwhile), then stops every task.
    /// Returns what was still running at the bound.
    pub async fn shutdown(&self, bound: Duration) -> Drained {
        self.begin_drain();
        self.drives.close();
        self.listeners.close();
        self.watches.close();
        // A listener's answer may resume its chain (a new drive), and a
        // drive may leave a listener: wait until both are empty at once.
        let drained = async {
            while !(self.drives.is_empty() && self.listeners.is_empty()) {
                self.drives.wait().await;
                self.listeners.wait().await;
            }
        };
        let left = match tokio::time::timeout(bound, drained).await {
            Ok(()) => Drained::default(),
            Err(_) => Drained {
                drives_cut: self.drives.len(),
                listeners_cut: self
                    .waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .values()
                    .cloned()
                    .collect(),
            },
        };
        self.stop.cancel();
        self.drives.wait().await;
        self.listeners.wait().await;
        self.watches.wait().await;
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future that keeps 64 KB across an await, as a drive keeps its
    /// state.
    async fn large_work() {
        let state = [1u8; 65_536];
        tokio::task::yield_now().await;
        std::hint::black_box(&state);
    }

    #[test]
    fn a_task_keeps_its_work_once_on_the_heap_not_in_its_own_state() {
        let work = large_work();
        assert!(std::mem::size_of_val(&work) >= 65_536);
        let task = until_stopped(CancellationToken::new(), work);
        // Inline, the wrappers kept two more copies' worth (196 KB).
        assert!(std::mem::size_of_val(&task) <= 256, "{} bytes", std::mem::size_of_val(&task));
    }

    #[tokio::test]
    async fn a_task_runs_its_work_to_the_end_unless_stopped() {
        let stop = CancellationToken::new();
        assert_eq!(until_stopped(stop.clone(), async { 7 }).await, Some(7));
        stop.cancel();
        assert_eq!(until_stopped(stop, std::future::pending::<u8>()).await, None);
    }
}
