//! Submitting an intent: the one path by which both `POST /v1/jobs` and
//! `POST /v1/chat/completions` create or find a job (R2, R3). It validates
//! the job request, fingerprints its canonical form and lets the database's
//! unique constraint decide. Nothing here calls a provider: the caller starts
//! driving a new job once this has returned it committed.

use serde_json::Value;
use uuid::Uuid;

use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::engine::{Creation, Kickoff};
use crate::jobs::{IdempotencyKey, Job, JobRequest, NewJob, canonical_json};
use crate::telemetry;

pub enum Submitted {
    /// This request created the job; it is committed and not yet driven:
    /// hand both to `Engine::spawn_drive_new`.
    New(Job, Kickoff),
    /// The same owner sent the same intent under this key before.
    Existing(Job),
}

/// Validates `body` as a job request and inserts-or-gets its job.
pub async fn submit(
    state: &AppState,
    caller: &Caller,
    key: IdempotencyKey,
    body: Value,
) -> Result<Submitted, Problem> {
    let new = new_job(state, caller, key, body)?;
    insert(state, &new).await
}

/// The job `body` would create, validated, with its id already chosen (so a
/// stream can be opened under it before it is driven).
pub fn new_job(
    state: &AppState,
    caller: &Caller,
    key: IdempotencyKey,
    body: Value,
) -> Result<NewJob, Problem> {
    let request: JobRequest = serde_json::from_value(body.clone()).map_err(|err| {
        Problem::new(ProblemType::InvalidBody, format!("the body is not a job request: {err}"))
            .titled("Invalid job request")
    })?;
    if request.input.messages.is_empty() {
        return Err(Problem::new(
            ProblemType::InvalidBody,
            "`input.messages` must hold at least one message",
        )
        .titled("Invalid job request"));
    }
    if state.config.route(&request.route).is_none() {
        return Err(Problem::new(
            ProblemType::UnknownRoute,
            format!("route `{}` is not configured; GET /v1/routes lists the routes", request.route),
        ));
    }
    let canonical = canonical_json(&body).map_err(|err| {
        Problem::new(ProblemType::MalformedJson, format!("the body cannot be canonicalised: {err}"))
    })?;
    Ok(NewJob::new(caller.0.owner.clone(), key, request.route, canonical))
}

/// Inserts `new` or finds the job its key already names.
pub async fn insert(state: &AppState, new: &NewJob) -> Result<Submitted, Problem> {
    let created = state
        .engine
        .create(new)
        .await
        .map_err(|err| super::attempts::engine_problem(err, StoreStage::BeforeCommit))?;
    match created {
        Creation::New(job, kickoff) => {
            tracing::debug!(job_id = %job.id, owner = %job.owner, route = %job.route, "job created");
            metrics::counter!(telemetry::JOBS, "result" => "created").increment(1);
            Ok(Submitted::New(job, kickoff))
        }
        Creation::Existing(job) if job.fingerprint == new.fingerprint => {
            metrics::counter!(telemetry::JOBS, "result" => "replayed").increment(1);
            Ok(Submitted::Existing(job))
        }
        Creation::Existing(job) => {
            metrics::counter!(telemetry::JOBS, "result" => "conflicted").increment(1);
            Err(reused(job.id))
        }
    }
}

fn reused(job_id: Uuid) -> Problem {
    Problem::new(
        ProblemType::IdempotencyKeyReused,
        "this Idempotency-Key is already bound to a different request body; use a new key for a new intent",
    )
    .with("job_id", job_id.to_string())
}
