//! Listening for the late answer of an `unknown` attempt (R5, R7).
//!
//! The attempt's HTTP call keeps running after its driver declared it
//! unknown. Whatever comes back settles it without starting anything new:
//! an answer is offered to the compare-and-swap (it may still win), a proven
//! failure makes it `failed` and lets the chain go on. When the provider's
//! `max_execution` has passed with no answer, nothing can come any more: the
//! attempt is `abandoned` and the chain goes on. Without `max_execution`
//! only an operator settles it.

use std::time::Duration;

use intentgate_providers::Outcome;
use tokio::task::JoinHandle;

use super::Engine;
use crate::jobs::{Attempt, AttemptState, JobStatus, now_ms};
use crate::store::Settle;

/// `resolved_by` of an attempt abandoned because `max_execution` passed.
pub const MAX_EXECUTION: &str = "max_execution";

impl Engine {
    pub(super) fn spawn_late_listener(
        &self,
        attempt: Attempt,
        call: Option<JoinHandle<Outcome>>,
        streamed: bool,
    ) {
        let engine = self.clone();
        tokio::spawn(async move {
            let max_execution: Option<Duration> = engine
                .provider(&attempt.provider)
                .and_then(|entry| entry.config.max_execution)
                .map(Into::into);
            let deadline = max_execution.map(|max| {
                let elapsed = u64::try_from(now_ms() - attempt.started_at_ms).unwrap_or(0);
                tokio::time::Instant::now() + max.saturating_sub(Duration::from_millis(elapsed))
            });
            let answer = match (call, deadline) {
                (Some(call), Some(deadline)) => tokio::time::timeout_at(deadline, call).await.ok(),
                (Some(call), None) => Some(call.await),
                (None, _) => None,
            };
            let settled = match answer {
                Some(Ok(Ok(response))) => {
                    let route = engine.store().job(attempt.job_id).await.ok().flatten().map(|job| job.route);
                    let verdict =
                        route.map_or(Ok(()), |route| engine.gate().check_output(&route, &response.text));
                    if let Err(violations) = verdict {
                        let detail =
                            format!("late answer breaks the route's contract: {}", violations.join("; "));
                        let settled = engine
                            .settle_open(
                                &attempt,
                                AttemptState::Failed,
                                super::driver::CONTRACT_VIOLATION,
                                &detail,
                                None,
                            )
                            .await;
                        if let Err(err) = settled {
                            tracing::error!(job_id = %attempt.job_id, error = %err, "cannot settle a late answer");
                        }
                        return;
                    }
                    if let Err(err) = engine.deliver(&attempt, &response, streamed).await {
                        tracing::error!(job_id = %attempt.job_id, error = %err, "cannot record a late answer");
                    }
                    return;
                }
                Some(Ok(Err(failure))) if failure.may_fail_over() => {
                    let detail = format!("late answer: {failure}");
                    engine
                        .settle_open(&attempt, AttemptState::Failed, failure.class().as_str(), &detail, None)
                        .await
                }
                // Still unknown (cut, provider timeout): only time can settle it now.
                _ => {
                    let Some(deadline) = deadline else { return };
                    tokio::time::sleep_until(deadline).await;
                    let detail =
                        "max_execution passed with no answer; the provider can no longer be working on it";
                    engine
                        .settle_open(
                            &attempt,
                            AttemptState::Abandoned,
                            "unknown",
                            detail,
                            Some(MAX_EXECUTION),
                        )
                        .await
                }
            };
            if let Err(err) = settled {
                tracing::error!(job_id = %attempt.job_id, error = %err, "cannot settle an unknown attempt");
            }
        });
    }

    /// Settles an `unknown` attempt as `to` and, if that happened here (not
    /// already elsewhere), resumes the job's chain.
    pub(super) async fn settle_open(
        &self,
        attempt: &Attempt,
        to: AttemptState,
        outcome: &str,
        detail: &str,
        resolved_by: Option<&str>,
    ) -> Result<bool, super::EngineError> {
        let settle = Settle {
            from: AttemptState::Unknown,
            to,
            outcome: Some(outcome),
            detail: Some(detail),
            response: None,
            resolved_by,
        };
        if !self.store().settle_attempt(attempt.id, settle, now_ms()).await? {
            return Ok(false);
        }
        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, state = %to, detail, "unknown attempt settled");
        self.resume(attempt.job_id).await?;
        self.emit_settled(attempt, to);
        Ok(true)
    }

    /// The job's unknown attempt is settled: it may go on with its chain.
    /// Driven here, or — from the operator CLI — left running without a
    /// lease, which the next sweep of a serving instance takes over.
    pub(super) async fn resume(&self, job_id: uuid::Uuid) -> Result<(), super::EngineError> {
        self.store().set_job_status(job_id, JobStatus::Unknown, JobStatus::Running, None, now_ms()).await?;
        self.notify(job_id);
        if self.inner.drives {
            self.spawn_drive(job_id, None);
        }
        Ok(())
    }
}
