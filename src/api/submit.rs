//! Submitting an intent: the one path by which both `POST /v1/jobs` and
//! every door create or find a job (R2, R3). It takes the job request its
//! door parsed and checked, and fingerprints its canonical form; the
//! engine's one entry ([`crate::engine::Engine::submit`]) lets the database's unique
//! constraint decide, drives a new job and waits. Errors come back as
//! problems that say whether the job was committed.

use std::time::Duration;

use axum::http::HeaderMap;

use super::{AppState, Caller, Problem, StoreStage};
use crate::engine::{Submission, SubmitError, Submitted};
use crate::jobs::{IdempotencyKey, JobRequest, NewJob};

/// Submits `new` and waits up to `wait`: plain (`stream = false`) or with
/// its live stream opened first.
pub async fn submit(
    state: &AppState,
    new: &std::sync::Arc<NewJob>,
    wait: Duration,
    stream: bool,
) -> Result<Submitted, Problem> {
    let submission = if state.config().route_named(new.route()).is_none() {
        job_of_unknown_route(state, new, wait, stream).await?
    } else if stream {
        state.engine.submit_streamed(new, wait).await
    } else {
        state.engine.submit(new, wait).await
    };
    match submission {
        Ok(Submission::Accepted(submitted)) => Ok(*submitted),
        Ok(Submission::Conflict { job_id }) => Err(Problem::key_reused(job_id)),
        Ok(Submission::Refused(refusal)) => {
            Err(Problem::limit(&refusal, &state.engine.currency(), state.engine.clock().now_ms()))
        }
        Err(SubmitError::BeforeCommit(err)) => Err(Problem::engine(err, StoreStage::BeforeCommit)
            .with("idempotency_key", new.idempotency_key.as_str())),
        Err(SubmitError::AfterCommit { job_id, source }) => Err(Problem::after_commit(source, job_id)),
    }
}

/// A request whose route is not configured: the job its key already names,
/// if there is one — a key's job is found whatever the configuration says
/// now (a reload may have removed the route since the job was created), and
/// replayed, or refused as a conflict when the body differs — else
/// `unknown-route`, with nothing stored.
async fn job_of_unknown_route(
    state: &AppState,
    new: &NewJob,
    wait: Duration,
    stream: bool,
) -> Result<Result<Submission, SubmitError>, Problem> {
    let found = state.store.job_by_key(&new.owner, new.idempotency_key.as_str()).await;
    match found.map_err(|err| Problem::store(err, StoreStage::Lookup))? {
        Some(job) => Ok(state.engine.replay(new, job, wait, stream).await),
        None => Err(Problem::unknown_route(new.route())),
    }
}

/// The job `request` (parsed and checked at its door) would create, with
/// its id already chosen (so a stream can be opened under it before it is
/// driven). Its route is not checked here: a route that is not configured
/// is refused by [`submit`] only when its key names no job yet.
pub fn new_job(
    state: &AppState,
    caller: &Caller,
    key: IdempotencyKey,
    mut request: JobRequest,
    headers: &HeaderMap,
) -> Result<NewJob, Problem> {
    // An alias is stored as the route's name: the same intent either way.
    if let Some(route) = state.config().route_named(&request.route)
        && route.name != request.route
    {
        request.route = route.name.clone();
    }
    if !caller.0.rights().may_use(&request.route) {
        return Err(Problem::route_not_allowed(&request.route));
    }
    let tags = super::tags::request_tags(headers, &request.params)?;
    let new = NewJob::new(caller.0.owner.clone(), key, request).map_err(Problem::not_canonical)?;
    Ok(new.attributed(caller.0.attribution(tags)))
}
