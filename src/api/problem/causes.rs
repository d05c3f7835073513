//! Every error of the layers below the HTTP border, as a problem: an
//! engine error, a budget or rate-limit refusal, a store failure after the
//! job existed, a key bound to another intent, a job with no answer. The
//! handlers and doors call these; none builds such a problem itself.

use serde_json::Value;
use uuid::Uuid;

use super::{Problem, ProblemType, StoreStage};
use crate::budgets::{LimitKind, LimitRefusal, nanos_to_decimal};
use crate::engine::{CONTENT_REFUSED, CountError, EngineError, OUTCOME_UNKNOWN};
use crate::jobs::{Attempt, Job, JobFailure, JobStatus, rfc3339};
use crate::store::StoreError;

impl Problem {
    /// An engine error; a store error says what `stage` the request had
    /// reached ([`Problem::store`]).
    pub fn engine(err: EngineError, stage: StoreStage) -> Problem {
        match err {
            EngineError::Store(err) => Problem::store(err, stage),
            EngineError::Unsendable(reason) => Problem::new(ProblemType::InvalidBody, reason),
            // Nothing was started: another replica, or this one restarted, can take it.
            EngineError::Stopped => Problem::new(ProblemType::Draining, err.to_string()),
            other => {
                tracing::error!(error = %other, "engine error");
                Problem::new(ProblemType::Internal, other.to_string())
            }
        }
    }

    /// `route` (a job request's `route`, a door's `model`) is not configured.
    pub fn unknown_route(route: &str) -> Problem {
        Problem::new(
            ProblemType::UnknownRoute,
            format!("route `{route}` is not configured; GET /v1/routes lists the routes"),
        )
    }

    /// A compatible door's `model` that names no route: a 404 in the
    /// door's own terms (OpenAI's `model_not_found`, Anthropic's
    /// `not_found_error`), naming the models that exist.
    pub fn model_not_found(model: &str, config: &crate::config::Config) -> Problem {
        let names: Vec<String> = config
            .routes
            .iter()
            .flat_map(|route| std::iter::once(&route.name).chain(&route.aliases))
            .map(|name| format!("`{name}`"))
            .collect();
        Problem::new(
            ProblemType::ModelNotFound,
            format!(
                "the model `{model}` does not exist here: a model names a route or one of its aliases \
                 (`aliases` on a [[routes]] entry); this gateway serves {}",
                names.join(", ")
            ),
        )
        .with("model", model)
    }

    /// A manual attempt on a job whose route is not configured any more
    /// (the job could take one, but there is no chain to take it on).
    pub fn route_gone(route: &str) -> Problem {
        Problem::new(
            ProblemType::UnknownRoute,
            format!(
                "this job's route `{route}` is not configured any more, so no attempt can start;                  the job itself is kept and can be read"
            ),
        )
    }

    /// A token count that could not be made: every slot busy (a 503 worth
    /// retrying), or its task ended without a count.
    pub fn count(err: CountError) -> Problem {
        match err {
            CountError::Busy(_) => Problem::new(ProblemType::TokenizerBusy, err.to_string()),
            CountError::Failed(_) => {
                tracing::error!(error = %err, "token count failed");
                Problem::new(ProblemType::Internal, err.to_string())
            }
        }
    }

    /// A store error once the job exists: it may have been sent, so the
    /// only safe retry is under the same key (see [`StoreStage::AfterCommit`]).
    pub fn after_commit(err: StoreError, job_id: Uuid) -> Problem {
        Problem::store(err, StoreStage::AfterCommit(job_id))
    }

    /// A compatible door's request without an `Idempotency-Key` on a route
    /// that refuses such requests (`keyless = "refuse"`): says both ways
    /// out, the header or the route's derivation.
    pub fn keyless_refused(route: &str) -> Problem {
        Problem::new(
            ProblemType::IdempotencyKeyMissing,
            format!(
                "route `{route}` refuses requests without an `Idempotency-Key` header (`keyless = \"refuse\"`): \
                 send one naming this intent (the same key on every retry of it, a new one for the next \
                 intent), or set `keyless = \"derive\"` on the route to let the gateway derive it"
            ),
        )
        .with("route", route)
    }

    /// The key is bound to another intent (R3), the job it names.
    pub fn key_reused(job_id: Uuid) -> Problem {
        Problem::new(
            ProblemType::IdempotencyKeyReused,
            "this Idempotency-Key is already bound to a different request body; use a new key for a new intent",
        )
        .with("job_id", job_id.to_string())
    }

    /// A refused job or attempt: `budget-exhausted` (not worth retrying
    /// before `resets_at`) or `rate-limited` (with `Retry-After` until the
    /// minute is over).
    pub fn limit(refusal: &LimitRefusal, currency: &str, now_ms: i64) -> Problem {
        let resets_at = rfc3339(refusal.window_end_ms);
        let problem = match refusal.kind {
            LimitKind::Budget => Problem::new(
                ProblemType::BudgetExhausted,
                format!(
                    "this request could cost up to {needed} {currency}, and the budget `{meter}` has \
                     {left} {currency} left of {limit} ({used} spent, {held} reserved by requests in \
                     flight); it resets at {resets_at}",
                    needed = nanos_to_decimal(refusal.amount),
                    meter = refusal.meter,
                    left = nanos_to_decimal((refusal.limit - refusal.used - refusal.held).max(0)),
                    limit = nanos_to_decimal(refusal.limit),
                    used = nanos_to_decimal(refusal.used),
                    held = nanos_to_decimal(refusal.held),
                ),
            )
            .with("currency", currency),
            LimitKind::Requests | LimitKind::Tokens => {
                let unit = if refusal.kind == LimitKind::Requests { "requests" } else { "tokens" };
                let wait_ms = (refusal.window_end_ms - now_ms).max(0);
                Problem::new(
                    ProblemType::RateLimited,
                    format!(
                        "the limit `{meter}` of {limit} {unit} per minute is reached ({used} used, {held} \
                         reserved, this request needs {needed}); retry after {resets_at}",
                        meter = refusal.meter,
                        limit = refusal.limit,
                        used = refusal.used,
                        held = refusal.held,
                        needed = refusal.amount,
                    ),
                )
                .retry_after(u64::try_from(wait_ms.div_euclid(1000) + 1).unwrap_or(1))
            }
        };
        problem.with("meter", refusal.meter.clone()).with("resets_at", resets_at)
    }

    /// Why a job has no answer to give (yet), naming it; `open` is its
    /// attempt whose outcome is unknown, if it has one.
    pub fn no_answer(job: &Job, open: Option<&Attempt>) -> Problem {
        let error = job.error.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok());
        let code = error.as_ref().and_then(|e| e["code"].as_str().map(str::to_owned));
        let problem = match job.status {
            JobStatus::Unknown => {
                let problem = Problem::new(
                    ProblemType::OutcomeUnknown,
                    "the provider may have done this work but no answer came back; the job is blocked until \
                     the attempt is settled. Do not retry under a new key",
                );
                match open {
                    Some(attempt) => {
                        problem.with("attempt_id", attempt.id.to_string()).with("attempt", attempt.number)
                    }
                    None => problem,
                }
            }
            JobStatus::Failed if code.as_deref() == Some(CONTENT_REFUSED) => Problem::new(
                ProblemType::ContentRefused,
                "the provider's content policy refused this request; the job's error has its reason",
            )
            .with("error_detail", error),
            JobStatus::Failed if code.as_deref() == Some(OUTCOME_UNKNOWN) => Problem::new(
                ProblemType::OutcomeUnknown,
                "the provider may have done this work but no answer came back, and no other provider may \
                 answer it: the job has ended (a late answer is still recorded). Do not retry under a new key",
            )
            .with("error_detail", error),
            JobStatus::Failed => {
                let failure = error.as_ref().and_then(|e| serde_json::from_value::<JobFailure>(e.clone()).ok());
                let what = failure.map_or_else(|| "see the job's error".to_owned(), |f| f.summary());
                Problem::new(
                    ProblemType::UpstreamFailed,
                    format!("every provider of the route's chain failed: {what}"),
                )
                .with("error_detail", error)
            }
            JobStatus::Cancelled => {
                Problem::new(ProblemType::JobCompleted, "the job was cancelled and will not complete")
                    .titled("Job cancelled")
            }
            JobStatus::Pending | JobStatus::Running | JobStatus::Succeeded => Problem::new(
                ProblemType::JobInProgress,
                "the job for this Idempotency-Key is still running; retry after the Retry-After delay to get \
                 its answer",
            ),
        };
        problem.with("job_id", job.id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_engine_is_a_503_not_an_internal_error() {
        let problem = Problem::engine(EngineError::Stopped, StoreStage::BeforeCommit);
        assert_eq!(problem.slug(), "draining");
        assert_eq!(problem.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
    }
}
