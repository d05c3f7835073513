//! Whether an attempt's request left the gateway (see [`Sent`]).
//!
//! Every attempt is written not yet sent, and marked sent — the mark
//! committed — just before its request is handed to the provider. So when
//! a driver's process dies between the two, recovery knows nothing went
//! out: the attempt fails as `not_sent` and the job starts again on the
//! same provider, where without the mark it could only call the attempt
//! `unknown`, wait out `max_execution` and fail over to the next provider.
//! A mark the store refuses is a send that does not happen: the attempt
//! fails as `not_sent` and the chain goes on. The mark and recovery's failure are each a guarded
//! write on the attempt still `starting` and not yet sent, so whichever
//! comes first wins: a driver whose attempt was failed does not send it,
//! and an attempt marked sent is never failed as unsent.
//!
//! The cost is one more write per attempt on the hot path
//! (docs/benchmarks.md). `[store] record_sends = false` gives it up: its
//! attempts are written "not recorded" (NULL), never marked, and recovery
//! treats each as possibly sent.

use uuid::Uuid;

use super::{Engine, EngineError};
use crate::jobs::{Attempt, AttemptOutcome, AttemptState, Sent};
use crate::telemetry;

impl Engine {
    /// Marks `attempt` sent before its request leaves. False: it must not be
    /// sent, a sweep that took its job over having settled it. On a store
    /// error it is not sent: it fails as `not_sent` where the store lets it
    /// (else recovery fails it), and the error ends the drive. Left
    /// `starting` instead, it could outlive its job: a late answer of an
    /// earlier attempt may complete the job meanwhile, and a finished job
    /// whose lease the drive gave back is not swept.
    pub(super) async fn hand_over(&self, attempt: &mut Attempt) -> Result<bool, EngineError> {
        if attempt.sent == Sent::Unrecorded {
            return Ok(true); // written where sends are not recorded
        }
        let now = self.now_ms();
        match self.store().mark_sent(attempt.id, now).await {
            Ok(true) => {
                attempt.sent = Sent::At(now);
                Ok(true)
            }
            Ok(false) => {
                tracing::info!(job_id = %attempt.job_id, attempt = attempt.number,
                    "the attempt was settled before it was sent (its job was taken over); not sending it");
                Ok(false)
            }
            Err(err) => {
                let err = EngineError::from(err);
                self.end_unsent(attempt, &err).await;
                Err(err)
            }
        }
    }

    /// An attempt whose send could not be marked was not sent: it ends
    /// `not_sent` (or, if the store will not have that either, the sweep
    /// fails it).
    async fn end_unsent(&self, attempt: &Attempt, err: &EngineError) {
        let reason = format!("the store could not record it as sent: {err}");
        let settled =
            self.settle_failed(attempt, AttemptState::Starting, AttemptOutcome::NotSent, &reason).await;
        if let Err(settling) = settled {
            tracing::warn!(job_id = %attempt.job_id, attempt = attempt.number, error = %settling,
                "cannot settle an attempt that was not sent; the sweep will");
        }
    }

    /// Recovery: the `starting` attempts of job `job_id` that were never
    /// sent fail as `not_sent`. Returns the provider of the last of them,
    /// where the job starts again.
    pub(super) async fn fail_unsent(&self, job_id: Uuid) -> Result<Option<String>, EngineError> {
        let detail = "the gateway instance driving this attempt stopped before sending it";
        let mut restart = None;
        for attempt in self.store().attempts(job_id).await? {
            if attempt.state != AttemptState::Starting || attempt.sent != Sent::NotYet {
                continue;
            }
            if self.store().unsent_to_failed(attempt.id, detail, self.now_ms()).await? {
                tracing::warn!(%job_id, attempt = attempt.number, provider = %attempt.provider, detail);
                let outcome = AttemptOutcome::NotSent.as_str();
                metrics::counter!(telemetry::ATTEMPTS, "provider" => attempt.provider.clone(), "outcome" => outcome)
                    .increment(1);
                restart = Some(attempt.provider);
            }
        }
        Ok(restart)
    }
}
