//! Wake-ups across replicas: a job settled by another gateway process wakes
//! this one's waiters on it (`Prefer: wait`, a duplicate request) within
//! the time PostgreSQL takes to deliver a `NOTIFY`, instead of at their
//! next re-read.
//!
//! A waiter asks for the announcement of a job driven elsewhere
//! (`Engine::wait_settled`, `Store::mark_awaited`); one task per process
//! holds a `LISTEN` connection ([`ChangeListener`]).
//! When it connects, and whenever it loses the connection, every waiter is
//! woken to re-read (an announcement sent while nobody listened is lost;
//! the re-read finds what it said), and waiters poll until it listens
//! again. SQLite has one process: its engine wakes its waiters directly.

use std::time::Duration;

use super::Engine;
use crate::store::ChangeListener;

/// The first pause before listening again after a failure; it doubles up to
/// [`MAX_PAUSE`] while the database stays away.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);

impl Engine {
    /// Starts the settled-job listener, on a store that has one.
    pub fn spawn_settled_listener(&self) {
        let Some(listener) = self.store().settled_listener(self.instance()) else { return };
        let engine = self.clone();
        self.tasks().spawn_watch(async move { engine.listen_settled(listener).await });
    }

    /// Listens until the task is stopped, reconnecting after every loss.
    async fn listen_settled(&self, listener: ChangeListener) {
        let waiters = &self.inner.waiters;
        let mut pause = FIRST_PAUSE;
        let mut connections = 0u64;
        loop {
            match listener.listen().await {
                Ok(mut feed) => {
                    connections += 1;
                    waiters.set_announced(Some(connections));
                    pause = FIRST_PAUSE;
                    tracing::debug!("listening for jobs settled by other replicas");
                    let lost = loop {
                        match feed.next().await {
                            Ok(job_id) => {
                                tracing::debug!(%job_id, "announced: a job settled on another replica");
                                waiters.notify(job_id);
                                let _ = self.inner.events.send(super::EngineEvent::Announced { job_id });
                            }
                            Err(err) => break err,
                        }
                    };
                    waiters.set_announced(None);
                    tracing::warn!(error = %lost, "stopped listening for settled jobs; waiters poll until it is back");
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for settled jobs; waiters poll meanwhile");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}
