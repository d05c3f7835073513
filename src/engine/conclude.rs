//! Carrying out what [`decide`] says an attempt's outcome means: the one
//! executor for the driver, the stream reader and the late listener.
//!
//! Every write here is a conditional UPDATE naming the state it leaves, so
//! whoever settles an attempt first settles it, and the others find zero
//! rows and stop. While the store is unreachable, an answer in hand (or a
//! proven failure) is *held*: its write is retried until the store is back
//! or the provider's `max_execution` has passed — the work was done, and
//! dropping it would make the chain pay for it twice.

use std::future::Future;
use std::time::Duration;

use intentgate_providers::{ChatResponse, Failure, Outcome};
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::continuation::Cut;
use super::decide::{AfterFailure, Observed, Phase, RetryPolicy, Step, decide};
use super::gathered::Gathered;
use super::{Engine, EngineError, StreamEvent};
use crate::jobs::{Attempt, AttemptOutcome, AttemptState, Job, JobFailure, JobResult, JobStatus};
use crate::store::{CasOutcome, Settle, StoreError};
use crate::telemetry;

/// `resolved_by` of an attempt abandoned because `max_execution` passed.
pub const MAX_EXECUTION: &str = "max_execution";

/// How long an answer is held while the store is unreachable, for a
/// provider without `max_execution`.
const HOLD_WITHOUT_MAX_EXECUTION: Duration = Duration::from_secs(300);

/// What the caller saw of a provider call.
pub(super) enum Seen {
    /// A complete answer; `streamed` when it arrived as a stream (its chunks
    /// are stored with it, for a byte-identical replay).
    Answer {
        response: Box<ChatResponse>,
        streamed: bool,
        /// The request's tools, when the route's contract checks tool calls.
        offer: Offered,
    },
    Failure(Failure),
    /// A stream that broke after part of it reached the client, on a route
    /// that lets another provider continue it: the failure, and what the
    /// client received (phase `Continuable`).
    Cut {
        failure: Failure,
        sent: Box<Gathered>,
    },
    /// No answer within the time allowed (`reason` says which); `call` is the
    /// call still running, whose answer may yet come.
    Silence {
        reason: String,
        call: Option<LateCall>,
    },
}

/// A job this drive completed: the job as the winning write left it, and
/// the number of the attempt that won.
#[derive(Debug)]
pub struct Completed {
    pub job: Box<Job>,
    pub attempt_number: i32,
    /// The result the winning write stored, before it was encoded: the
    /// request whose drive this was answers from it, rather than decode the
    /// row it was written to.
    pub result: Box<JobResult>,
    /// The room its answer holds in the answer budget, kept until the
    /// request it answers has rendered it (see `AnswerBudget`).
    pub room: intentgate_providers::Held,
}

/// What an attempt's outcome was, as its `detail` says it.
fn describe(phase: Phase, seen: &Seen, violations: Option<&[String]>) -> String {
    let what = match (seen, violations) {
        (_, Some(violations)) => format!("the answer breaks the route's contract: {}", violations.join("; ")),
        (Seen::Failure(failure) | Seen::Cut { failure, .. }, _) => failure.to_string(),
        (Seen::Silence { reason, .. }, _) => reason.clone(),
        (Seen::Answer { .. }, None) => String::new(),
    };
    match phase {
        Phase::Live { .. } => what,
        Phase::Continuable if violations.is_none() => {
            format!(
                "after part of the answer reached the client: {what}; the chain's next provider continues it"
            )
        }
        Phase::Streamed | Phase::Continuable => format!("after its first chunk reached the client: {what}"),
        Phase::Late => format!("late: {what}"),
        Phase::Hedged => format!("beside a hedge: {what}"),
    }
}

/// What the driver does after one attempt.
pub(super) enum Next {
    /// The job is settled, or waits on an unknown attempt: stop driving.
    Stop,
    /// This attempt's answer won the compare-and-swap, which also released
    /// the lease (or left it to a hedge's trail, while another attempt is
    /// in flight): stop driving, nothing left to release.
    Completed(Completed),
    /// Proven failure: the next provider of the chain, at once.
    FailOver,
    /// A stream broke after part of it reached the client: the chain's next
    /// provider continues what the client received (`continuation.rs`).
    Continue(Box<Cut>),
    /// A retryable rejection: the same provider again after a pause.
    Retry { provider: String, after: Duration },
    /// (Late answers only) nothing proven yet: keep waiting for
    /// `max_execution`.
    Wait,
}

/// A provider call still running after its attempt was declared `unknown`.
pub(super) struct LateCall {
    pub call: JoinHandle<Option<Outcome>>,
    pub streamed: bool,
    pub offer: Offered,
}

/// What [`super::Gate::offer`] read from the attempt's request.
pub(super) type Offered = Option<std::sync::Arc<crate::contracts::Offer>>;

/// The job error `code` of a job that ended with an attempt whose outcome
/// is unknown (see [`Step::Unknown`]): it may have been executed.
pub const OUTCOME_UNKNOWN: &str = "outcome-unknown";

/// The job error `code` of a job a provider's content policy refused.
pub const CONTENT_REFUSED: &str = "content-refused";

impl Engine {
    /// Decides what `seen` means for `attempt` in `phase` and does it.
    pub(super) async fn conclude(
        &self,
        attempt: &Attempt,
        route: &str,
        phase: Phase,
        seen: Seen,
    ) -> Result<Next, EngineError> {
        let violations = match &seen {
            Seen::Answer { response, offer, .. } => {
                self.gate().check_output(route, response, offer.as_deref()).err()
            }
            _ => None,
        };
        use super::health::Sign;
        let (sign, observed) = match &seen {
            Seen::Answer { .. } => {
                (Sign::Answered, Observed::Answer { breaks_contract: violations.is_some() })
            }
            Seen::Failure(failure) | Seen::Cut { failure, .. } => {
                (Sign::of_failure(failure), Observed::Failure(failure))
            }
            Seen::Silence { .. } => (Sign::Trouble, Observed::Silence),
        };
        self.observe_health(&attempt.provider, sign);
        let step = decide(phase, observed, &self.retry_policy(route));
        let detail = || describe(phase, &seen, violations.as_deref());
        tracing::debug!(job_id = %attempt.job_id, attempt = attempt.number, ?phase, ?step, "outcome decided");
        match step {
            Step::Deliver => {
                let Seen::Answer { response, streamed, .. } = seen else { return Ok(Next::Stop) };
                self.deliver(attempt, route, *response, streamed).await
            }
            Step::Fail { outcome, then } => {
                let detail = detail();
                let from = if phase == Phase::Late { AttemptState::Unknown } else { AttemptState::Starting };
                if !self.settle_failed(attempt, from, outcome, &detail).await? {
                    return Ok(Next::Stop); // settled elsewhere first (a sweep, an operator)
                }
                match (then, seen) {
                    (AfterFailure::Continue, Seen::Cut { sent, .. }) => {
                        Ok(self.continue_cut(attempt, route, *sent))
                    }
                    (AfterFailure::Continue, _) => {
                        self.after_failure(attempt, AfterFailure::FailJob, detail).await
                    }
                    (then, _) => self.after_failure(attempt, then, detail).await,
                }
            }
            Step::Unknown { fail_job } => {
                let detail = detail();
                let pending = match seen {
                    Seen::Silence { call, .. } => call,
                    _ => None,
                };
                self.outcome_unknown(attempt, route, phase, &detail, pending, fail_job).await?;
                Ok(Next::Stop)
            }
            Step::Continue => {
                let detail = detail();
                let Seen::Cut { sent, .. } = seen else {
                    // Nothing to continue from: the stream ends as without the option.
                    self.outcome_unknown(attempt, route, Phase::Streamed, &detail, None, true).await?;
                    return Ok(Next::Stop);
                };
                self.declare_unknown(attempt, &detail, false).await?;
                self.spawn_late_listener(attempt.clone(), route.to_owned(), None);
                Ok(self.continue_cut(attempt, route, *sent))
            }
            Step::KeepWaiting => Ok(Next::Wait),
            Step::Abandon => {
                let detail =
                    "max_execution passed with no answer; the provider can no longer be working on it";
                self.settle_open(attempt, AttemptState::Abandoned, detail, Some(MAX_EXECUTION)).await?;
                Ok(Next::Stop)
            }
        }
    }

    /// The chain's next provider is to continue what the client received
    /// of `attempt`, which ran (at least in part): a possible duplicate.
    fn continue_cut(&self, attempt: &Attempt, route: &str, sent: Gathered) -> Next {
        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, "a cut stream is continued");
        metrics::counter!(telemetry::POSSIBLE_DUPLICATES, "route" => route.to_owned()).increment(1);
        metrics::counter!(telemetry::STREAM_CONTINUATIONS, "route" => route.to_owned()).increment(1);
        Next::Continue(Box::new(Cut { attempt: attempt.number, sent }))
    }

    /// Carries out what follows a proven failure (`then`), once the attempt
    /// was settled `failed` with `detail`.
    async fn after_failure(
        &self,
        attempt: &Attempt,
        then: AfterFailure,
        detail: String,
    ) -> Result<Next, EngineError> {
        Ok(match then {
            AfterFailure::FailOver => Next::FailOver,
            // Not reached: a continuation needs what the client received.
            AfterFailure::Continue => Next::Stop,
            AfterFailure::Beside => Next::Stop,
            AfterFailure::RetryAfter(after) => {
                let after = jittered(after);
                tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, ?after, "retrying after rejection");
                Next::Retry { provider: attempt.provider.clone(), after }
            }
            AfterFailure::FailJob => {
                self.fail_job(attempt.job_id, &JobFailure::of_attempt(detail, attempt.number)).await?;
                Next::Stop
            }
            AfterFailure::Refused => {
                let reason =
                    format!("`{}` refused the request by its content policy: {detail}", attempt.provider);
                let error = JobFailure {
                    code: Some(CONTENT_REFUSED.to_owned()),
                    ..JobFailure::of_attempt(reason, attempt.number)
                };
                self.fail_job(attempt.job_id, &error).await?;
                Next::Stop
            }
            AfterFailure::Resume => {
                self.resume(attempt.job_id).await?;
                self.emit_settled(attempt, AttemptState::Failed);
                Next::Stop
            }
        })
    }

    /// The attempt may have done the work: it becomes `unknown` and its
    /// late answer is listened for; with `fail_job` (see [`Step::Unknown`])
    /// the job ends at once.
    async fn outcome_unknown(
        &self,
        attempt: &Attempt,
        route: &str,
        phase: Phase,
        detail: &str,
        pending: Option<LateCall>,
        fail_job: bool,
    ) -> Result<(), EngineError> {
        // Beside a hedge the job goes on with the other attempt; it waits
        // on this one only once none is left (see `hedge::race`). A job
        // that ends here never waits: it goes from running to failed.
        self.declare_unknown(attempt, detail, phase != Phase::Hedged && !fail_job).await?;
        if phase == Phase::Hedged {
            // Another attempt runs, or answered, beside this one, which may
            // have done the work too: the intent may have run twice.
            metrics::counter!(telemetry::POSSIBLE_DUPLICATES, "route" => route.to_owned()).increment(1);
        }
        self.spawn_late_listener(attempt.clone(), route.to_owned(), pending);
        if fail_job {
            self.end_unknown(attempt, phase, detail).await?;
        }
        // Announced once the job's state is final: whoever listens (a
        // stream's door) reads what the job became, not a state between.
        // Beside a hedge, the job's stream is another attempt's to end.
        if phase == Phase::Hedged {
            self.notify(attempt.job_id);
        } else {
            self.announce_unknown(attempt, detail);
        }
        Ok(())
    }

    /// A job whose attempt is `unknown` and that no other provider may
    /// answer: it fails at once (a late answer still completes it).
    async fn end_unknown(&self, attempt: &Attempt, phase: Phase, detail: &str) -> Result<(), EngineError> {
        let why = match phase {
            Phase::Streamed => {
                "part of this attempt's answer already reached the client, so no other provider may answer it"
            }
            _ => "the request's key was minted, so no client can come back for a second execution's answer",
        };
        let reason = format!("attempt {} outcome unknown ({detail}); {why}", attempt.number);
        let error = JobFailure {
            code: Some(OUTCOME_UNKNOWN.to_owned()),
            ..JobFailure::of_attempt(reason, attempt.number)
        };
        self.write_job_failure(attempt.job_id, &error).await.map(drop)
    }

    fn retry_policy(&self, route: &str) -> RetryPolicy {
        match self.route(route) {
            Some(route) => RetryPolicy {
                retries: route.retries,
                backoff: route.retry_backoff.into(),
                max_wait: route.max_retry_wait.into(),
                statuses: route.retry_statuses.clone(),
                not_sent: route.retry_connect_errors,
                content_fails_over: route.fail_over_content_refusals,
            },
            None => RetryPolicy::none(),
        }
    }

    /// R6: an answer is offered to the job through the compare-and-swap.
    async fn deliver(
        &self,
        attempt: &Attempt,
        route: &str,
        response: ChatResponse,
        streamed: bool,
    ) -> Result<Next, EngineError> {
        let finish_reason = response.finish_reason.clone();
        let usage = response.usage.as_ref().map(|usage| (usage.prompt_tokens, usage.completion_tokens));
        let answered_model = response.model.clone();
        let room = response.room.clone();
        // Won or superseded, the provider did the work: it costs what it
        // reported (its reservation if it reported nothing).
        let reported = response.completion.get("usage").filter(|usage| !usage.is_null());
        let measured = self.measure(&attempt.provider, reported);
        let usage_json = reported.map(serde_json::Value::to_string);
        let details = reported.and_then(crate::budgets::TokenUsage::from_openai);
        let charged = crate::jobs::charge(
            AttemptState::Succeeded,
            Some(AttemptOutcome::Ok),
            attempt.reserved,
            measured,
        )
        .unwrap_or(attempt.reserved);
        self.record_over_reservation(attempt, measured, charged);
        let result = Box::new(JobResult {
            provider: attempt.provider.clone(),
            model: response.model,
            text: response.text,
            json: response.json,
            usage: response.usage.and_then(|usage| serde_json::to_value(usage).ok()),
            finish_reason: response.finish_reason,
            completion: Some(response.completion),
            chunks: if streamed { response.chunks } else { None },
            native: response.native,
        });
        let stored = result.encode();
        // Where the result holds the raw answer parsed, it is kept once.
        let raw_in_result = response.raw_held;
        // Valid UTF-8 in practice: checked by the fast path, not decoded
        // character by character.
        let raw = match std::str::from_utf8(&response.raw) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&response.raw),
        };
        let outcome = self
            .hold(attempt, "record an answer", || {
                self.store().complete_job(
                    attempt,
                    &stored,
                    (&raw, raw_in_result),
                    (charged, usage_json.as_deref()),
                    self.now_ms(),
                )
            })
            .await?;
        self.count_delivery(attempt, route, &outcome, charged, (answered_model.as_deref(), usage, details));
        let (next, settled, event) = cas_result(attempt, outcome, finish_reason, (result, room));
        if streamed {
            self.streams().publish(attempt.job_id, event);
        }
        self.notify(attempt.job_id);
        if let Some(state) = settled {
            self.emit_settled(attempt, state);
        }
        Ok(next)
    }

    /// Counts and traces a delivered answer: its tokens (`usage`, as
    /// input and output), what the compare-and-swap did, its charge, and a
    /// second execution if another attempt had completed the job first.
    fn count_delivery(
        &self,
        attempt: &Attempt,
        route: &str,
        outcome: &CasOutcome,
        charged: crate::jobs::Amounts,
        (answered_model, usage, details): (
            Option<&str>,
            Option<(u64, u64)>,
            Option<crate::budgets::TokenUsage>,
        ),
    ) {
        let series = self.series(&attempt.provider);
        if let Some((input, output)) = usage {
            series.input_tokens.increment(input);
            series.output_tokens.increment(output);
        }
        if let Some(details) = details {
            series.cached_input_tokens.increment(details.cached_tokens);
            series.cache_write_tokens.increment(details.cache_write_tokens);
            series.reasoning_tokens.increment(details.reasoning_tokens);
        }
        series.answered.increment(1);
        crate::traces::record_outcome(AttemptOutcome::Ok.as_str());
        let cas = match outcome {
            CasOutcome::Won(_) => "won",
            CasOutcome::Superseded { .. } => "superseded",
            CasOutcome::NotDeliverable => "not_deliverable",
        };
        crate::traces::record_answer(answered_model, usage, cas);
        if !matches!(outcome, CasOutcome::NotDeliverable) {
            self.record_charge(attempt, Some(charged));
        }
        if let CasOutcome::Superseded { winner: Some(_) } = outcome {
            // Both answered: the intent ran twice (a hedge, or a late answer
            // after the chain went on), and this one was paid for too.
            metrics::counter!(telemetry::DUPLICATE_EXECUTIONS, "route" => route.to_owned()).increment(1);
            metrics::counter!(telemetry::DUPLICATE_SPEND, "route" => route.to_owned())
                .increment(u64::try_from(charged.nanos).unwrap_or(0));
        }
    }

    /// Proven no work: `from` (the attempt's open state) → `failed`. False
    /// when it was no longer in `from`.
    pub(super) async fn settle_failed(
        &self,
        attempt: &Attempt,
        from: AttemptState,
        outcome: AttemptOutcome,
        detail: &str,
    ) -> Result<bool, EngineError> {
        let charge = crate::jobs::charge(AttemptState::Failed, Some(outcome), attempt.reserved, None);
        let settle = Settle {
            from,
            to: AttemptState::Failed,
            outcome: Some(outcome),
            detail: Some(detail),
            response: None,
            resolved_by: None,
            charge,
        };
        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, %outcome, detail, "attempt failed");
        let settled = self
            .hold(attempt, "record a failure", || {
                self.store().settle_attempt(attempt.id, settle, self.now_ms())
            })
            .await?;
        if settled {
            self.record_charge(attempt, charge);
            metrics::counter!(telemetry::ATTEMPTS, "provider" => attempt.provider.clone(), "outcome" => outcome.as_str())
                .increment(1);
            crate::traces::record_outcome(outcome.as_str());
            // An `unknown` attempt's settling is announced by the caller
            // once the job resumed (see `settle_open`).
            if from != AttemptState::Unknown {
                self.emit_settled(attempt, AttemptState::Failed);
            }
        }
        Ok(settled)
    }

    /// R5: the attempt may have done the work. It becomes `unknown` — and
    /// with `job_waits` its job too, and nothing else starts until it is
    /// settled.
    async fn declare_unknown(
        &self,
        attempt: &Attempt,
        reason: &str,
        job_waits: bool,
    ) -> Result<(), EngineError> {
        let settle = Settle {
            from: AttemptState::Starting,
            to: AttemptState::Unknown,
            outcome: Some(AttemptOutcome::Unknown),
            detail: Some(reason),
            response: None,
            resolved_by: None,
            // It keeps its reservation: it may have been billed.
            charge: None,
        };
        tracing::warn!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, reason, "attempt outcome unknown");
        let settled = self
            .hold(attempt, "record an unknown outcome", || {
                self.store().settle_attempt(attempt.id, settle, self.now_ms())
            })
            .await?;
        if settled {
            if job_waits {
                self.wait_on_unknown(attempt.job_id).await?;
            }
            metrics::counter!(telemetry::ATTEMPTS, "provider" => attempt.provider.clone(), "outcome" => AttemptOutcome::Unknown.as_str())
                .increment(1);
            crate::traces::record_outcome(AttemptOutcome::Unknown.as_str());
            self.emit_settled(attempt, AttemptState::Unknown);
        }
        Ok(())
    }

    /// Tells the attempt's stream, and whoever waits on its job, that its
    /// outcome is unknown.
    fn announce_unknown(&self, attempt: &Attempt, reason: &str) {
        let event = StreamEvent::Failed {
            attempt: attempt.number,
            code: "outcome-unknown",
            message: reason.to_owned(),
        };
        self.streams().publish(attempt.job_id, event);
        self.notify(attempt.job_id);
    }

    /// A running job whose way on is an `unknown` attempt becomes `unknown`
    /// (a cancelled job stays cancelled; only a running one waits).
    pub(super) async fn wait_on_unknown(&self, job_id: Uuid) -> Result<(), EngineError> {
        self.store()
            .set_job_status(job_id, JobStatus::Running, JobStatus::Unknown, None, self.now_ms())
            .await?;
        Ok(())
    }

    /// Settles an `unknown` attempt as `to` (`failed` by an operator, or
    /// `abandoned`) and, if that happened here (not already elsewhere),
    /// resumes the job's chain.
    pub(super) async fn settle_open(
        &self,
        attempt: &Attempt,
        to: AttemptState,
        detail: &str,
        resolved_by: Option<&str>,
    ) -> Result<bool, EngineError> {
        let charge = crate::jobs::charge(to, Some(AttemptOutcome::Unknown), attempt.reserved, None);
        let settle = Settle {
            from: AttemptState::Unknown,
            to,
            outcome: Some(AttemptOutcome::Unknown),
            detail: Some(detail),
            response: None,
            resolved_by,
            charge,
        };
        if !self.store().settle_attempt(attempt.id, settle, self.now_ms()).await? {
            return Ok(false);
        }
        self.record_charge(attempt, charge);
        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, state = %to, detail, "unknown attempt settled");
        // Announced once the job moved on, so that whoever waits on the
        // event finds the job `running` again, not still `unknown`.
        self.resume(attempt.job_id).await?;
        self.emit_settled(attempt, to);
        Ok(true)
    }

    /// The job's unknown attempt is settled: if the job was waiting on it
    /// (`unknown`), its chain goes on — driven here, or, from the operator
    /// CLI, left `running` without a lease for a serving instance's sweep.
    /// A job cancelled meanwhile stays as it is.
    pub(super) async fn resume(&self, job_id: Uuid) -> Result<(), EngineError> {
        let resumed = self
            .store()
            .set_job_status(job_id, JobStatus::Unknown, JobStatus::Running, None, self.now_ms())
            .await?;
        self.notify(job_id);
        if resumed && self.inner.drives {
            self.spawn_drive(job_id, None);
        }
        Ok(())
    }

    /// Fails the job from whatever state it is in now (the caller's copy
    /// may predate its last transition).
    pub(super) async fn fail_job(&self, job_id: Uuid, error: &JobFailure) -> Result<(), EngineError> {
        let error = self.write_job_failure(job_id, error).await?;
        self.streams()
            .publish(job_id, StreamEvent::Failed { attempt: 0, code: "upstream-failed", message: error });
        self.notify(job_id);
        Ok(())
    }

    /// Fails the job (unless it can no longer fail: it succeeded meanwhile,
    /// or was cancelled); the error as stored.
    async fn write_job_failure(&self, job_id: Uuid, error: &JobFailure) -> Result<String, EngineError> {
        let error = error.encode();
        if let Some(current) = self.store().job(job_id).await?
            && current.status.can_become(JobStatus::Failed)
        {
            self.store().fail_job(job_id, current.status, &error, self.instance(), self.now_ms()).await?;
            tracing::warn!(%job_id, error, "job failed");
        }
        Ok(error)
    }

    /// Runs `write`, retrying it while the store is unreachable, until the
    /// attempt's provider can no longer be working on it (`max_execution`
    /// from the attempt's start; five minutes without one). The write is
    /// conditional, so a retry after a lost acknowledgement finds zero rows
    /// and changes nothing.
    async fn hold<T, F>(&self, attempt: &Attempt, what: &str, write: impl Fn() -> F) -> Result<T, EngineError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let limit = self
            .provider(&attempt.provider)
            .and_then(|entry| entry.config.max_execution)
            .map_or(HOLD_WITHOUT_MAX_EXECUTION, Into::into);
        let deadline = (attempt.started_at_ms + super::clock::millis(limit)).max(self.now_ms() + 10_000);
        let mut pause = Duration::from_millis(50);
        loop {
            match write().await {
                Err(StoreError::Unavailable(err)) if self.now_ms() < deadline => {
                    let _ = self
                        .inner
                        .events
                        .send(super::EngineEvent::Holding { job_id: attempt.job_id, number: attempt.number });
                    tracing::warn!(job_id = %attempt.job_id, attempt = attempt.number, error = %err, "store unreachable: holding on to {what}, retrying");
                    tokio::time::sleep(pause.min(self.clock().until(deadline))).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                other => return other.map_err(EngineError::from),
            }
        }
    }
}

/// What the compare-and-swap's `outcome` means for the drive, the attempt's
/// state and the live stream's last event.
fn cas_result(
    attempt: &Attempt,
    outcome: CasOutcome,
    finish_reason: Option<String>,
    (result, room): (Box<JobResult>, intentgate_providers::Held),
) -> (Next, Option<AttemptState>, StreamEvent) {
    match outcome {
        CasOutcome::Won(job) => {
            tracing::debug!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, "job succeeded");
            let done = StreamEvent::Done { attempt: attempt.number, finish_reason };
            let completed = Completed { job, attempt_number: attempt.number, result, room };
            (Next::Completed(completed), Some(AttemptState::Succeeded), done)
        }
        CasOutcome::Superseded { winner } => {
            metrics::counter!(telemetry::RACES_LOST).increment(1);
            let why = if winner.is_some() {
                "another attempt completed the job first"
            } else {
                "the job was cancelled"
            };
            tracing::warn!(
                job_id = %attempt.job_id, attempt = attempt.number, attempt_id = %attempt.id,
                winner = ?winner, "race lost: {why}; this answer is kept on the attempt only"
            );
            let message = format!("{why}; this stream is not its result");
            let lost = StreamEvent::Failed { attempt: attempt.number, code: "superseded", message };
            (Next::Stop, Some(AttemptState::Superseded), lost)
        }
        CasOutcome::NotDeliverable => {
            tracing::warn!(job_id = %attempt.job_id, attempt = attempt.number, "answer of an attempt already settled as failed; ignored");
            let message = "this attempt was settled as failed before its answer arrived".to_owned();
            (Next::Stop, None, StreamEvent::Failed { attempt: attempt.number, code: "superseded", message })
        }
    }
}

/// `wait` stretched by a random 0–25 %: never shorter (a `Retry-After` is a
/// floor), but jobs rejected together do not all return at the same instant.
fn jittered(wait: Duration) -> Duration {
    let spread = u64::try_from((wait / 4).as_nanos()).unwrap_or(u64::MAX);
    wait + Duration::from_nanos(super::random::below(spread))
}
