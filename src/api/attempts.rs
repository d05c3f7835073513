//! Attempts by hand, settling unknown attempts, and cancelling jobs (R4, R5).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::auth::Admin;
use super::extract::{JsonBody, LimitedBody, PathParams};
use super::jobs::{job_response, visible_job};
use super::view::AttemptView;
use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::engine::Resolution;
use crate::jobs::{JobStatus, StartBlocked};

/// Optional body of `POST /v1/jobs/{id}/attempts`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartAttempt {
    /// A provider of the route's chain; default: the chain's next one.
    provider: Option<String>,
}

/// `POST /v1/jobs/{id}/attempts`: 202 with the job once the attempt row is
/// committed; 409 while another attempt is `starting` or `unknown`.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/attempts",
    tag = "attempts",
    operation_id = "start_attempt",
    summary = "Start the job's next attempt by hand",
    description = "Answers 202 with the job once the attempt row is committed. No attempt starts while \
        another is `starting` or `unknown`: the 409 names the blocking attempt.",
    security(("bearer" = [])),
    params(("id" = uuid::Uuid, Path, description = "The job id")),
    request_body(content = Option<StartAttempt>, description = "Optional: the provider to try"),
    responses(
        (status = 202, description = "The attempt is started; the job as it is now",
            body = super::view::JobView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no such job, or not the caller's",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`attempt-in-flight`, `outcome-unknown`, `job-completed`, \
            `no-eligible-provider` (with `job_id`, `attempt_id`, `attempt` where they apply)",
            body = Problem, content_type = "application/problem+json", headers(
                ("x-should-retry" = String, description = "`false`"),
        )),
        (status = 422, description = "`provider-not-in-chain`; `unknown-route`: the job's route is not \
            configured any more (checked after the job's state: a settled job is a 409 either way)",
            body = Problem, content_type = "application/problem+json"),
        (status = 429, response = super::problem::LimitReached),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
    LimitedBody(body): LimitedBody,
) -> Result<Response, Problem> {
    let job = visible_job(&state, &caller, &id).await?;
    // The body is optional: empty means "the chain's next provider".
    let provider = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let parsed: StartAttempt = serde_json::from_slice(&body)
            .map_err(|err| Problem::new(ProblemType::InvalidBody, err.to_string()))?;
        if let Some(provider) = &parsed.provider {
            super::text::refuse_nul("`provider`", provider)?;
        }
        parsed.provider
    };
    let job_id = job.id;
    let after_commit = |err| Problem::after_commit(err, job_id);
    match state.engine.start_attempt_by_hand(&job, provider).await {
        Ok(_) => {
            let job = state.store.job(job_id).await.map_err(after_commit)?.unwrap_or(job);
            let attempts = state.store.attempts(job_id).await.map_err(after_commit)?;
            Ok(job_response(StatusCode::ACCEPTED, &job, &attempts, false))
        }
        Err(err) => {
            Err(Problem::manual_start(err, job_id, &state.engine.currency(), state.engine.clock().now_ms()))
        }
    }
}

/// How an operator settles `unknown` attempts.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolve {
    #[serde(rename = "as")]
    #[schema(value_type = crate::engine::Resolution)]
    resolution: String,
    /// Why; recorded on the attempt. Must not be blank.
    #[schema(min_length = 1)]
    reason: String,
}

impl Resolve {
    fn parse(self) -> Result<(Resolution, String), Problem> {
        let resolution = self.resolution.parse().map_err(|msg: String| {
            Problem::new(ProblemType::InvalidBody, msg).titled("Invalid resolution")
        })?;
        super::text::refuse_nul("`reason`", &self.reason)?;
        if self.reason.trim().is_empty() {
            return Err(
                Problem::new(ProblemType::InvalidBody, "give a `reason`").titled("Invalid resolution")
            );
        }
        Ok((resolution, self.reason))
    }
}

/// `POST /v1/jobs/{id}/attempts/{n}/resolve` (admin): settles an `unknown`
/// attempt as `abandoned` or `failed`; the job then goes on with its chain.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/attempts/{number}/resolve",
    tag = "attempts",
    operation_id = "resolve_attempt",
    summary = "Settle an unknown attempt (admin)",
    description = "Settles an `unknown` attempt as `abandoned` (a late answer still counts) or `failed` \
        (known not done); the job then goes on with its chain.",
    security(("bearer" = [])),
    params(
        ("id" = uuid::Uuid, Path, description = "The job id"),
        ("number" = i32, Path, minimum = 1, description = "The attempt number"),
    ),
    request_body(content = Resolve),
    responses(
        (status = 200, description = "The settled attempt", body = AttemptView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 404, description = "`not-found`: no such job or attempt",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`attempt-not-unknown`",
            body = Problem, content_type = "application/problem+json", headers(
                ("x-should-retry" = String, description = "`false`"),
        )),
        (status = 422, description = "`invalid-body`: not `abandoned`/`failed`, or no `reason`",
            body = Problem, content_type = "application/problem+json"),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn resolve(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams((id, number)): PathParams<(String, i32)>,
    JsonBody(body): JsonBody<Resolve>,
) -> Result<Response, Problem> {
    let (resolution, reason) = body.parse()?;
    let job = visible_job(&state, &caller, &id).await?;
    match state.engine.resolve(job.id, number, resolution, &reason, &caller.0.name).await {
        Ok(attempt) => Ok(Json(AttemptView::new(&attempt)).into_response()),
        Err(err) => Err(Problem::resolve(err, job.id, number)),
    }
}

/// `POST /v1/providers/{name}/resolve` (admin): an outage — settles every
/// `unknown` attempt of one provider at once.
#[utoipa::path(
    post,
    path = "/v1/providers/{name}/resolve",
    tag = "attempts",
    operation_id = "resolve_provider",
    summary = "Settle every unknown attempt of a provider (admin)",
    description = "An outage: settles every `unknown` attempt of one provider at once.",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The provider name")),
    request_body(content = Resolve),
    responses(
        (status = 200, description = "The attempts settled", body = ProviderResolved),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 422, description = "`invalid-body`: not `abandoned`/`failed`, or no `reason`",
            body = Problem, content_type = "application/problem+json"),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn resolve_provider(
    State(state): State<AppState>,
    Admin(caller): Admin,
    PathParams(provider): PathParams<String>,
    JsonBody(body): JsonBody<Resolve>,
) -> Result<Response, Problem> {
    super::text::refuse_nul("the provider name", &provider)?;
    let (resolution, reason) = body.parse()?;
    let settled = state
        .engine
        .resolve_provider(&provider, resolution, &reason, &caller.0.name)
        .await
        .map_err(|err| Problem::engine(err, StoreStage::Partway))?;
    let resolved =
        settled.iter().map(|a| ResolvedAttempt { job_id: a.job_id, attempt: AttemptView::new(a) }).collect();
    Ok(Json(ProviderResolved { provider: &provider, resolved }).into_response())
}

/// `POST /v1/jobs/{id}/cancel`: the job will not complete; 409 if it
/// already has.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "attempts",
    operation_id = "cancel_job",
    summary = "Cancel a job",
    description = "The job will not complete; an attempt in flight cannot be recalled, but its answer \
        will not complete the job.",
    security(("bearer" = [])),
    params(("id" = uuid::Uuid, Path, description = "The job id")),
    responses(
        (status = 200, description = "The cancelled job", body = super::view::JobView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no such job, or not the caller's",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`job-completed`: it already succeeded (`job_status`)",
            body = Problem, content_type = "application/problem+json", headers(
                ("x-should-retry" = String, description = "`false`"),
        )),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
) -> Result<Response, Problem> {
    let job_id = visible_job(&state, &caller, &id).await?.id;
    let after_commit = |err| Problem::after_commit(err, job_id);
    let Some(job) = state.engine.cancel(job_id).await.map_err(after_commit)? else {
        return Err(Problem::new(ProblemType::NotFound, format!("no job `{id}`")));
    };
    if job.status != JobStatus::Cancelled {
        return Err(Problem::blocked(&StartBlocked::Completed { status: job.status }));
    }
    let attempts = state.store.attempts(job_id).await.map_err(after_commit)?;
    Ok(job_response(StatusCode::OK, &job, &attempts, false))
}

/// `POST /v1/providers/{name}/resolve`: what was settled.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ProviderResolved<'a> {
    provider: &'a str,
    resolved: Vec<ResolvedAttempt<'a>>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ResolvedAttempt<'a> {
    job_id: uuid::Uuid,
    attempt: AttemptView<'a>,
}
