//! Listening for the late answer of an `unknown` attempt (R5, R7).
//!
//! The attempt's HTTP call keeps running after it was declared unknown.
//! Whatever comes back is concluded in phase `Late` (see `decide.rs`): an
//! answer is offered to the compare-and-swap — it may still win, even if
//! the job failed meanwhile — and a proven failure makes the attempt
//! `failed` and lets the chain go on. When the provider's `max_execution`
//! has passed with no answer, nothing can come any more: the attempt is
//! `abandoned` and the chain goes on. Without `max_execution` only an
//! operator settles it.

use std::time::Duration;

use tracing::Instrument;

use super::Engine;
use super::conclude::Next;
use super::conclude::{LateCall, Seen};
use super::decide::Phase;
use crate::jobs::Attempt;

impl Engine {
    /// Listens for `attempt`'s late answer; `route` is its job's route
    /// (passed in, so that listening needs no read of a store that may be
    /// down right now).
    pub(super) fn spawn_late_listener(&self, attempt: Attempt, route: String, pending: Option<LateCall>) {
        let engine = self.clone();
        let what = format!("attempt {} of job {} on `{}`", attempt.number, attempt.job_id, attempt.provider);
        // In the trace, a child of the attempt's span (which ended `unknown`).
        let span = tracing::info_span!(
            parent: None,
            "late_answer",
            job_id = %attempt.job_id,
            attempt = attempt.number,
            provider = %attempt.provider,
            outcome = tracing::field::Empty,
        );
        crate::traces::beside_current(&span);
        self.tasks().spawn_listener(what, self.keep_config(async move {
            let job_id = attempt.job_id;
            if let Err(err) = engine.listen_late(attempt, &route, pending).await {
                tracing::error!(%job_id, error = %err, "cannot settle an unknown attempt; the recovery sweep will");
            }
        }.instrument(span)));
    }

    async fn listen_late(
        &self,
        attempt: Attempt,
        route: &str,
        pending: Option<LateCall>,
    ) -> Result<(), super::EngineError> {
        let max_execution: Option<Duration> =
            self.provider(&attempt.provider).and_then(|entry| entry.config.max_execution).map(Into::into);
        let deadline = max_execution.map(|max| {
            let left = self.clock().until(attempt.started_at_ms + super::clock::millis(max));
            tokio::time::Instant::now() + left
        });
        if let Some(LateCall { call, streamed, offer }) = pending {
            let answer = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, call).await.ok(),
                None => Some(call.await),
            };
            let seen = match answer {
                Some(Ok(Some(Ok(response)))) => {
                    Some(Seen::Answer { response: Box::new(response), streamed, offer })
                }
                Some(Ok(Some(Err(failure)))) => Some(Seen::Failure(failure)),
                // The call was stopped (shutdown) or its task died: nothing proven.
                Some(Ok(None) | Err(_)) => None,
                // max_execution passed first.
                None => Some(Seen::Silence { reason: "max_execution passed".into(), call: None }),
            };
            if let Some(seen) = seen
                && !matches!(self.conclude(&attempt, route, Phase::Late, seen).await?, Next::Wait)
            {
                return Ok(());
            }
        }
        // Nothing proven: only time (or an operator) can settle it now.
        let Some(deadline) = deadline else { return Ok(()) };
        tokio::time::sleep_until(deadline).await;
        let silence = Seen::Silence { reason: "max_execution passed".into(), call: None };
        self.conclude(&attempt, route, Phase::Late, silence).await.map(drop)
    }
}
