//! Supervised background work: every task the engine starts is tracked, so
//! that a graceful shutdown can wait for it, and none outlives the engine
//! unnoticed.
//!
//! Two kinds of work:
//! - **drives** (a job being taken through its chain, an answer being
//!   recorded): on shutdown they get a grace period to settle;
//! - **watches** (late-answer listeners, the lease renewer, the settled-job
//!   listener, the sweep, provider calls): they may wait for minutes, so
//!   shutdown does not wait for them;
//!   it stops them once the drives are done. What they would have settled is the recovery sweep's to
//!   settle, on this instance's next start or on another replica: leases
//!   expire, `starting` attempts become `unknown`, `max_execution` abandons.
//!
//! This is the one place that calls `tokio::spawn` (clippy's
//! `disallowed_methods` refuses it elsewhere in the crate).

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone, Default)]
pub struct Tasks {
    drives: TaskTracker,
    watches: TaskTracker,
    /// Cancelled when the grace period is over (drives) or at once (watches).
    stop_drives: CancellationToken,
    stop_watches: CancellationToken,
}

impl Tasks {
    /// Work that should finish before the process exits.
    pub fn spawn_drive<F>(&self, work: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let stop = self.stop_drives.clone();
        self.drives.spawn(async move { stop.run_until_cancelled(work).await })
    }

    /// Work that may wait long and is stopped at once on shutdown.
    pub fn spawn_watch<F>(&self, work: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let stop = self.stop_watches.clone();
        self.watches.spawn(async move { stop.run_until_cancelled(work).await })
    }

    /// How many tasks of each kind are running: `(drives, watches)`.
    pub fn running(&self) -> (usize, usize) {
        (self.drives.len(), self.watches.len())
    }

    /// Gives the drives `grace` to finish, then stops every task: the
    /// watches are not waited for (a provider call a drive awaits is a watch
    /// too, so they are stopped only once the drives are done). Returns how
    /// many drives were cut short (their jobs are left to the recovery sweep).
    pub async fn shutdown(&self, grace: Duration) -> usize {
        self.drives.close();
        self.watches.close();
        let cut = match tokio::time::timeout(grace, self.drives.wait()).await {
            Ok(()) => 0,
            Err(_) => self.drives.len(),
        };
        self.stop_watches.cancel();
        self.stop_drives.cancel();
        self.drives.wait().await;
        self.watches.wait().await;
        cut
    }
}
