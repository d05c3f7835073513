//! The native jobs API: create (idempotently) and read jobs.

use axum::Json;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use uuid::Uuid;

use std::time::Duration;

use super::extract::{PathParams, QueryParams};
use super::idempotency::idempotency_key;
use super::prefer::wait_preference;
use super::submit::{new_job, submit};
use super::view::JobView;
use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::jobs::{Job, JobStatus};

/// Header that marks a response as the replay of an earlier request.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// `POST /v1/jobs`: R2 and R3 in one place. Order matters: caller, key and
/// body are all checked before anything is stored, so a refused request
/// never uses up its key.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    operation_id = "create_job",
    summary = "Create a job, or find the one this Idempotency-Key already names",
    description = "The caller, the key and the body are all checked before anything is stored, so a \
        refused request never uses up its key. The same key with the same body (compared in canonical \
        form) answers the existing job.",
    security(("bearer" = [])),
    params(
        ("Idempotency-Key" = String, Header, min_length = 1,
            description = "Names the intent: 1–255 visible ASCII characters, sent once; the RFC 8941 \
                quoted form `\"abc\"` is accepted and means `abc`."),
        ("Prefer" = Option<String>, Header, example = "wait=10",
            description = "`wait=N` (RFC 7240): block up to N seconds (at most 60) for the job to settle."),
    ),
    request_body(content = crate::jobs::JobRequest, description = "The intent; unknown fields are refused."),
    responses(
        (status = 201, description = "A new job", body = JobView, headers(
            ("Location" = String, description = "`/v1/jobs/{id}`"),
            ("Preference-Applied" = String, description = "`wait=N` when `Prefer: wait` was honoured"),
        )),
        (status = 200, description = "The job this key and body created before", body = JobView, headers(
            ("Idempotent-Replayed" = String, description = "`true`"),
            ("Preference-Applied" = String, description = "`wait=N` when `Prefer: wait` was honoured"),
        )),
        (status = 400, description = "`idempotency-key-missing`, `idempotency-key-invalid`, `malformed-json`, \
            `malformed-request`",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 409, description = "`idempotency-key-reused`: the key names another body (`job_id`)",
            body = Problem, content_type = "application/problem+json", headers(
                ("x-should-retry" = String, description = "`false`"),
        )),
        (status = 413, response = super::problem::BodyTooLarge),
        (status = 422, description = "`invalid-body`, `unknown-route`",
            body = Problem, content_type = "application/problem+json"),
        (status = 429, response = super::problem::LimitReached),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, Problem> {
    // The request whole, not `HeaderMap` and `Body`: that extractor copies
    // every header.
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let key = idempotency_key(headers)?;
    let body = super::extract::read_body(body, state.max_body_bytes).await?;
    let request = super::job_request::parse(super::ijson::parse(&body)?)?;
    let new = std::sync::Arc::new(new_job(&state, &caller, key, request, headers)?);
    let wait = wait_preference(headers);
    let submitted = submit(&state, &new, wait.unwrap_or_default(), false).await?;
    let status = if submitted.replayed { StatusCode::OK } else { StatusCode::CREATED };
    let job = &submitted.job;
    let attempts = match (&submitted.first_attempt, wait) {
        // Answered at once: the attempt inserted with the job is all there is.
        (Some(first), None) => vec![first.clone()],
        _ => state.store.attempts(job.id).await.map_err(|err| Problem::after_commit(err, job.id))?,
    };
    let mut response = job_response(status, job, &attempts, submitted.replayed);
    if let Some(wait) = wait.filter(|wait| !wait.is_zero())
        && let Ok(applied) = HeaderValue::from_str(&format!("wait={}", wait.as_secs()))
    {
        response.headers_mut().insert("preference-applied", applied);
    }
    response.extensions_mut().insert(provider_time(&submitted, wait.is_some_and(|wait| !wait.is_zero())));
    Ok(super::held_body::held_until_written(response, submitted.room))
}

/// The provider time a submission spent, for the overhead histogram: its
/// own drive's, or none to subtract for a replay that did not wait; unknown
/// (left out of the histogram) when the request waited on work it cannot
/// account for (another request's drive, or its own still running).
pub(super) fn provider_time(
    submitted: &crate::engine::Submitted,
    waited: bool,
) -> super::metrics::ProviderTime {
    match submitted.provider_time {
        Some(spent) => super::metrics::ProviderTime(Some(spent)),
        None if !waited => super::metrics::ProviderTime(Some(Duration::ZERO)),
        None => super::metrics::ProviderTime(None),
    }
}

#[derive(Debug, Deserialize)]
pub struct ByKey {
    idempotency_key: Option<String>,
}

/// `GET /v1/jobs?idempotency_key=K`: find the job a key created, e.g. after
/// a client lost the response to its POST.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    operation_id = "find_job_by_key",
    summary = "The caller's job for an Idempotency-Key",
    description = "Finds the job a key created, e.g. after a client lost the response to its POST.",
    security(("bearer" = [])),
    params(
        ("idempotency_key" = String, Query, min_length = 1,
            description = "The key, as sent in `Idempotency-Key`"),
    ),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 400, description = "`missing-parameter`, `idempotency-key-invalid`, `malformed-request`",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no job of the caller's has this key",
            body = Problem, content_type = "application/problem+json"),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn find_by_key(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<ByKey>,
) -> Result<Response, Problem> {
    let Some(key) = query.idempotency_key else {
        return Err(Problem::new(ProblemType::MissingParameter, "pass `?idempotency_key=<key>`"));
    };
    let key = crate::jobs::IdempotencyKey::parse(&key)
        .map_err(|err| Problem::new(ProblemType::IdempotencyKeyInvalid, err.to_string()))?;
    let job = state
        .store
        .job_by_key(&caller.0.owner, key.as_str())
        .await
        .map_err(|err| Problem::store(err, StoreStage::Lookup))?
        .ok_or_else(|| Problem::new(ProblemType::NotFound, "no job of yours has this idempotency key"))?;
    let attempts = state
        .store
        .attempts(job.id)
        .await
        .map_err(|err| Problem::store(err, StoreStage::AfterCommit(job.id)))?;
    Ok(job_response(StatusCode::OK, &job, &attempts, false))
}

/// `GET /v1/jobs/{id}`. Another owner's job answers 404, not 403: ids of
/// other owners' jobs are not confirmed to exist.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    operation_id = "get_job",
    summary = "A job with its attempts",
    description = "Another owner's job answers 404 (admins see every job).",
    security(("bearer" = [])),
    params(
        ("id" = Uuid, Path, description = "The job id"),
        ("Prefer" = Option<String>, Header, example = "wait=10",
            description = "`wait=N` (RFC 7240): block up to N seconds (at most 60) for the job to settle."),
    ),
    responses(
        (status = 200, description = "The job", body = JobView, headers(
            ("Preference-Applied" = String, description = "`wait=N` when `Prefer: wait` was honoured"),
        )),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no such job, or not the caller's",
            body = Problem, content_type = "application/problem+json"),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> Result<Response, Problem> {
    let job = visible_job(&state, &caller, &id).await?;
    let wait = wait_preference(&headers).unwrap_or_default();
    let job_id = job.id;
    let job = if wait.is_zero() || !matches!(job.status, JobStatus::Pending | JobStatus::Running) {
        job
    } else {
        state
            .engine
            .wait_settled(job_id, wait)
            .await
            .map_err(|err| Problem::after_commit(err, job_id))?
            .unwrap_or(job)
    };
    let attempts = state.store.attempts(job_id).await.map_err(|err| Problem::after_commit(err, job_id))?;
    let mut response = job_response(StatusCode::OK, &job, &attempts, false);
    if !wait.is_zero()
        && let Ok(applied) = HeaderValue::from_str(&format!("wait={}", wait.as_secs()))
    {
        response.headers_mut().insert("preference-applied", applied);
    }
    Ok(response)
}

/// The job `id` if the caller may see it: its owner, or an admin. The
/// owner is part of the store's query ([`crate::store::Store::job_for_owner`]),
/// so another owner's job is a miss like a missing one — same 404, same
/// time — and its row (request and result) is never loaded. Until it is
/// read, whether it exists is not known: a store failure here is a
/// [`StoreStage::Lookup`].
pub async fn visible_job(state: &AppState, caller: &Caller, id: &str) -> Result<Job, Problem> {
    let not_found = || Problem::new(ProblemType::NotFound, format!("no job `{id}`"));
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    let owner = (!caller.0.is_admin()).then_some(caller.0.owner.as_str());
    state
        .store
        .job_for_owner(id, owner)
        .await
        .map_err(|err| Problem::store(err, StoreStage::Lookup))?
        .ok_or_else(not_found)
}

pub fn job_response(
    status: StatusCode,
    job: &Job,
    attempts: &[crate::jobs::Attempt],
    replayed: bool,
) -> Response {
    let mut response = (status, Json(JobView::new(job, attempts))).into_response();
    let headers = response.headers_mut();
    if status == StatusCode::CREATED
        && let Ok(location) = HeaderValue::from_str(&format!("/v1/jobs/{}", job.id))
    {
        headers.insert(header::LOCATION, location);
    }
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}
