//! Why an attempt cannot be started or settled by hand, as problems: the
//! 409s that name the attempt or state that blocks it (R4), and the
//! refusals of a manual start and of an operator's resolve.

use uuid::Uuid;

use super::{Problem, ProblemType, StoreStage};
use crate::engine::{ManualStartError, ResolveError};
use crate::jobs::StartBlocked;

impl Problem {
    /// The 409 for a refused attempt, naming the attempt that blocks it.
    pub fn blocked(blocked: &StartBlocked) -> Problem {
        match blocked {
            StartBlocked::InFlight { attempt_id, number } => Problem::new(
                ProblemType::AttemptInFlight,
                format!("attempt {number} is starting: its request may be in flight"),
            )
            .with("attempt_id", attempt_id.to_string())
            .with("attempt", *number),
            StartBlocked::OutcomeUnknown { attempt_id, number } => Problem::new(
                ProblemType::OutcomeUnknown,
                format!(
                    "attempt {number}'s outcome is unknown: the provider may have done the work. \
                     It must be settled (its late answer, or an operator's resolve) before another attempt starts"
                ),
            )
            .with("attempt_id", attempt_id.to_string())
            .with("attempt", *number),
            StartBlocked::Completed { status } => Problem::new(
                ProblemType::JobCompleted,
                format!("the job is `{status}`; no attempt can change that"),
            )
            .with("job_status", status.as_str()),
        }
    }

    /// Why an attempt of job `job_id` was not started by hand (a limit's
    /// refusal told in `currency`, as of `now_ms`).
    pub fn manual_start(err: ManualStartError, job_id: Uuid, currency: &str, now_ms: i64) -> Problem {
        let of_the_job = |problem: Problem| problem.with("job_id", job_id.to_string());
        match err {
            ManualStartError::Blocked(blocked) => of_the_job(Problem::blocked(&blocked)),
            ManualStartError::Driven => of_the_job(Problem::new(
                ProblemType::AttemptInFlight,
                "another gateway instance is driving this job right now",
            )),
            ManualStartError::NotInChain(name) => Problem::new(
                ProblemType::ProviderNotInChain,
                format!("provider `{name}` is not in this job's route chain"),
            ),
            ManualStartError::NoEligibleProvider(refused) => Problem::new(
                ProblemType::NoEligibleProvider,
                format!(
                    "no provider of the route's chain has a passing, current contract record: {}",
                    refused.join("; ")
                ),
            ),
            ManualStartError::RouteGone(route) => of_the_job(Problem::route_gone(&route)),
            ManualStartError::Refused(refusal) => of_the_job(Problem::limit(&refusal, currency, now_ms)),
            ManualStartError::Engine(err) => Problem::engine(err, StoreStage::AfterCommit(job_id)),
        }
    }

    /// Why attempt `number` of job `job_id` was not settled by hand.
    pub fn resolve(err: ResolveError, job_id: Uuid, number: i32) -> Problem {
        match err {
            ResolveError::NotFound => {
                Problem::new(ProblemType::NotFound, format!("job `{job_id}` has no attempt {number}"))
            }
            err @ ResolveError::NotUnknown { .. } => {
                Problem::new(ProblemType::AttemptNotUnknown, err.to_string())
            }
            ResolveError::Engine(err) => Problem::engine(err, StoreStage::AfterCommit(job_id)),
        }
    }
}
