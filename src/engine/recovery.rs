//! The recovery sweep (R5, R10): at start-up and then periodically, this
//! instance takes over jobs whose driver stopped renewing its lease (a
//! crashed or killed gateway) and settles unknown attempts whose provider's
//! `max_execution` has passed.
//!
//! A taken-over job's `starting` attempts that were never sent (their
//! mark says so, see `handover.rs`) fail as `not_sent`, and the job starts
//! again on the same provider. The others become `unknown` — the dead
//! process may have sent them — never `failed`, and they are never re-sent.
//! That holds whatever the job's status: a job cancelled while its dead
//! driver's attempt was in flight stays `cancelled`, and its attempt becomes
//! `unknown` so that its late answer, `max_execution` or an operator can
//! settle it. A job still to be driven with no open attempt simply goes on
//! with its chain, and so does a job left `unknown` after its attempt was
//! settled (a process that died between the two writes).

use uuid::Uuid;

use super::conclude::Seen;
use super::decide::Phase;
use super::driver::First;
use super::{Engine, EngineError};
use crate::jobs::JobStatus;

const BATCH: i64 = 100;

impl Engine {
    /// Runs [`Engine::sweep_once`] now and then every `sweep_interval`.
    pub fn spawn_sweeper(&self) {
        let engine = self.clone();
        self.tasks().spawn_watch(async move {
            let mut tick = tokio::time::interval(engine.inner.sweep_interval);
            loop {
                tick.tick().await;
                if let Err(err) = engine.sweep_once().await {
                    tracing::warn!(error = %err, "recovery sweep failed; retrying at the next tick");
                }
            }
        });
    }

    /// One pass; returns how many jobs it took over.
    pub async fn sweep_once(&self) -> Result<usize, EngineError> {
        let mut taken = 0;
        for (job_id, status) in self.store().expired_leases(self.now_ms(), BATCH).await? {
            if self.take_over(job_id, status).await? {
                taken += 1;
            }
        }
        for job_id in self.store().stranded_unknown_jobs(BATCH).await? {
            tracing::warn!(%job_id, "resuming a job left `unknown` after its attempt was settled");
            self.resume(job_id).await?;
        }
        self.abandon_overdue().await?;
        Ok(taken)
    }

    async fn take_over(&self, job_id: Uuid, status: JobStatus) -> Result<bool, EngineError> {
        if !self.claim(job_id).await? {
            return Ok(false);
        }
        let restart = self.fail_unsent(job_id).await?;
        let marked = self
            .store()
            .starting_to_unknown(
                job_id,
                "the gateway instance driving this attempt stopped; the request may have been sent",
                self.now_ms(),
            )
            .await?;
        if marked > 0 {
            tracing::warn!(%job_id, %status, "took over a job with an in-flight attempt: outcome unknown");
            if status == JobStatus::Running {
                self.store()
                    .set_job_status(job_id, JobStatus::Running, JobStatus::Unknown, None, self.now_ms())
                    .await?;
            }
            self.store().release_lease(job_id, self.instance()).await?;
            self.notify(job_id);
        } else if status.is_terminal() {
            tracing::info!(%job_id, %status, "released the lease of a finished job whose driver stopped");
            self.store().release_lease(job_id, self.instance()).await?;
        } else {
            // A never-sent attempt starts again where it was to be sent.
            let first = match restart {
                Some(provider) => {
                    tracing::info!(%job_id, %provider, "took over a job whose attempt was never sent; sending it again");
                    First::Provider(provider)
                }
                None => {
                    tracing::info!(%job_id, "took over a job whose driver stopped; continuing its chain");
                    First::Plan
                }
            };
            let engine = self.clone();
            self.tasks().spawn_drive(self.keep_config(async move {
                if let Err(err) = engine.drive_claimed(job_id, first).await {
                    tracing::error!(%job_id, error = %err, "driving a recovered job failed");
                }
            }));
        }
        Ok(true)
    }

    /// Unknown attempts older than their provider's `max_execution` are
    /// abandoned — the backstop for attempts whose listener died with its
    /// process.
    async fn abandon_overdue(&self) -> Result<(), EngineError> {
        for provider in self.store().providers_with_unknown_attempts().await? {
            let Some(max) = self.provider(&provider).and_then(|entry| entry.config.max_execution) else {
                continue;
            };
            let cutoff = self.now_ms() - super::clock::millis(max.into());
            for attempt in self.store().unknown_attempts_of(&provider, cutoff).await? {
                // The same decision as a listener's at max_execution (Late,
                // silence), so that what follows is decided in one place.
                let Some(job) = self.store().job(attempt.job_id).await? else { continue };
                let silence = Seen::Silence { reason: "max_execution passed".into(), call: None };
                self.conclude(&attempt, &job.route, Phase::Late, silence).await?;
            }
        }
        Ok(())
    }
}
