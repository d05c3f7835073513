//! The OpenAI Responses door: `POST /v1/responses`, what the OpenAI Agents
//! SDK speaks by default, on the same job machinery as every door.
//!
//! `model` names a route. The request becomes a job request: the request as
//! the client sent it, which a Responses provider is sent, beside its chat
//! view for every other dialect (see [`translate`] and [`fields`]), marked
//! as this door's (`"door": "openai-responses"`).
//! `previous_response_id` names an earlier response of the same owner: its
//! conversation (without its instructions, as OpenAI has it) and its answer
//! come before this request's input, so the job's request — and the intent
//! its key binds — is the whole conversation. The response's id is
//! `resp_<job id>`. Errors carry OpenAI's `error` member, as on chat
//! completions.

mod continuation;
mod fields;
mod items;
mod render;
mod translate;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::State;
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value};

use super::door::errors::door_errors;
use super::door::{Door, Translated};
use super::{AppState, Caller, Problem, ProblemType};
use crate::jobs::{Entrance, Job, JobResult, JobStatus};

/// This door's routes; their problems answer in OpenAI's error shape.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/responses", post(responses))
        .route("/v1/responses/{id}", get(retrieve))
        .route("/v1/responses/{id}/input_items", get(input_items))
        .route("/v1/responses/{id}/cancel", post(cancel))
        .route_layer(middleware::from_fn(door_errors::<Responses>))
}

/// This door's part of the OpenAPI document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(responses, retrieve, input_items, cancel))]
pub(super) struct Api;

/// The Responses door.
pub struct Responses;

impl Door for Responses {
    type Stream = render::EventStream;
    const ENTRANCE: Entrance = Entrance::Responses;

    fn translate(body: &Bytes, headers: &axum::http::HeaderMap) -> Result<Translated, Problem> {
        let fields = super::door::json_object(body, "Invalid Responses request")?;
        let translation = translate::to_job(fields, headers)?;
        let translate::Translation { job, stream, continues, background } = translation;
        Ok(Translated { job, stream, continues, background })
    }

    fn body(job: &Job, result: JobResult) -> Option<Vec<u8>> {
        render::response_body(&render::Identity::of(job), &result)
    }

    fn stream(job: &Job) -> render::EventStream {
        render::EventStream::new(render::Identity::of(job))
    }

    fn unfinished(job: &Job) -> Option<Vec<u8>> {
        let status = match job.status {
            JobStatus::Pending => "queued",
            JobStatus::Cancelled => "cancelled",
            _ => "in_progress",
        };
        serde_json::to_vec(&render::unfinished(&render::Identity::of(job), status)).ok()
    }

    fn error(problem: Map<String, Value>) -> Map<String, Value> {
        super::openai::error_body(problem)
    }

    async fn prepare(state: &AppState, caller: &Caller, translated: &mut Translated) -> Result<(), Problem> {
        match translated.continues {
            Some(previous) => {
                continuation::continue_conversation(state, caller, &mut translated.job, previous).await
            }
            None => Ok(()),
        }
    }
}

/// `POST /v1/responses`.
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "openai",
    operation_id = "create_response",
    summary = "Create a response (OpenAI Responses API), as one idempotent job",
    description = "Creates or attaches to a job exactly as `POST /v1/chat/completions` does, from a \
        Responses request. A provider of the Responses dialect is sent the request as the client sent \
        it (reasoning items, custom and built-in tools, `include`, `prompt_cache_key`, every field), \
        with only its model changed; another dialect is sent its translation — `input` (a string, or \
        message, `function_call` and `function_call_output` items), `instructions`, function `tools`, \
        `tool_choice`, `text.format`, `reasoning.effort`, `max_output_tokens`, `temperature`, `top_p`, \
        `metadata`, `user` — or is passed over naming what it cannot be sent. `previous_response_id` \
        names an earlier response of the same owner, whose conversation this one continues. With \
        `stream: true` the answer is the Responses event stream (`response.created` … \
        `response.completed`, each event with `sequence_number`).",
    security(("bearer" = [])),
    params(
        ("Idempotency-Key" = String, Header, min_length = 1,
            description = "Names the intent, as on `POST /v1/chat/completions`."),
    ),
    request_body(content = Object, description = "A Responses request; `model` names a route."),
    responses(
        (status = 200, description = "The response (or its event stream)",
            content((Object = "application/json"), (String = "text/event-stream"))),
        (status = 400, description = "`idempotency-key-missing`, `idempotency-key-invalid`, `malformed-json`",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: `previous_response_id` names no response of this owner",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency-key-reused`, `outcome-unknown`, `job-completed`, \
            `job-in-progress`; with `job_id`",
            body = Problem, content_type = "application/problem+json"),
        (status = 413, response = super::problem::BodyTooLarge),
        (status = 422, description = "`invalid-body` (with `path`), `unknown-route`",
            body = Problem, content_type = "application/problem+json"),
        (status = 429, response = super::problem::LimitReached),
        (status = 502, response = super::problem::UpstreamFailed),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn responses(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, Problem> {
    super::door::serve::<Responses>(&state, &caller, request).await
}

/// `GET /v1/responses/{id}`: a response as it stands, for a client that
/// asked in the `background` (or lost its answer): the response once its
/// job succeeded, `in_progress` while it runs, or the problem that says why
/// it has no answer. The caller's own responses only.
#[utoipa::path(
    get,
    path = "/v1/responses/{id}",
    tag = "openai",
    operation_id = "retrieve_response",
    summary = "A response as it stands",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "A response id, `resp_<job id>`")),
    responses(
        (status = 200, description = "The response: completed, or `in_progress`", body = Object),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no response of yours has this id",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`outcome-unknown`, `job-completed` (cancelled); with `job_id`",
            body = Problem, content_type = "application/problem+json"),
        (status = 502, response = super::problem::UpstreamFailed),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn retrieve(
    State(state): State<AppState>,
    caller: Caller,
    super::extract::PathParams(id): super::extract::PathParams<String>,
) -> Result<Response, Problem> {
    let job = own_response(&state, &caller, &id).await?;
    super::door::answer::<Responses>(
        &state,
        &job,
        super::door::AnswerAs { early: true, ..Default::default() },
    )
    .await
}

/// The job of the caller's response `id`, else `not-found` (another
/// owner's response does not exist for this caller).
async fn own_response(state: &AppState, caller: &Caller, id: &str) -> Result<Job, Problem> {
    let not_found = || Problem::new(ProblemType::NotFound, format!("no response `{id}` of yours"));
    let job_id = render::job_of_response(id).ok_or_else(not_found)?;
    let found =
        state.store.job(job_id).await.map_err(|err| Problem::store(err, super::StoreStage::Lookup))?;
    found.filter(|job| job.owner == caller.0.owner).ok_or_else(not_found)
}

/// `GET /v1/responses/{id}/input_items`'s query.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// Items after this item id, in the order asked.
    after: Option<String>,
    /// 1 to 100; 20 when absent.
    limit: Option<usize>,
    /// `desc` (newest first, the default) or `asc`.
    order: Option<String>,
    /// Accepted when empty (what the SDKs send): no extra fields exist to include.
    #[serde(default)]
    include: Vec<String>,
}

/// `GET /v1/responses/{id}/input_items`: the conversation the response
/// answered, as input items (see [`items`]).
#[utoipa::path(
    get,
    path = "/v1/responses/{id}/input_items",
    tag = "openai",
    operation_id = "list_input_items",
    summary = "The input items of a response",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "A response id, `resp_<job id>`"), ItemsQuery),
    responses(
        (status = 200, description = "A list of input items", body = Object),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no response of yours has this id",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body`: a bad `limit` or `order`",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn input_items(
    State(state): State<AppState>,
    caller: Caller,
    super::extract::PathParams(id): super::extract::PathParams<String>,
    super::extract::QueryParams(query): super::extract::QueryParams<ItemsQuery>,
) -> Result<Json<Value>, Problem> {
    let invalid = |detail: &str, name: &str| {
        Problem::new(ProblemType::InvalidBody, detail.to_owned()).with("path", format!("/{name}"))
    };
    let limit = query.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(invalid("`limit` must be from 1 to 100", "limit"));
    }
    let ascending = match query.order.as_deref() {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(_) => return Err(invalid("`order` must be `asc` or `desc`", "order")),
    };
    if !query.include.is_empty() {
        return Err(invalid("`include` is not supported by this gateway", "include"));
    }
    let job = own_response(&state, &caller, &id).await?;
    let request: crate::jobs::JobRequest = serde_json::from_str(&job.request).map_err(|err| {
        Problem::new(ProblemType::Internal, format!("the response's stored request cannot be read: {err}"))
    })?;
    let all = items::input_items(job.id, &request.input.messages);
    Ok(Json(items::page(all, ascending, query.after.as_deref(), limit)))
}

/// `POST /v1/responses/{id}/cancel`: a response not done yet will not be;
/// an attempt in flight cannot be recalled, but its answer will not
/// complete it. A response that already completed is not cancelled.
#[utoipa::path(
    post,
    path = "/v1/responses/{id}/cancel",
    tag = "openai",
    operation_id = "cancel_response",
    summary = "Cancel a response (one asked in the background)",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "A response id, `resp_<job id>`")),
    responses(
        (status = 200, description = "The response, `cancelled`", body = Object),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no response of yours has this id",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`job-completed`: it has already completed or failed",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    super::extract::PathParams(id): super::extract::PathParams<String>,
) -> Result<Response, Problem> {
    let job = own_response(&state, &caller, &id).await?;
    let cancelled = state.engine.cancel(job.id).await.map_err(|err| Problem::after_commit(err, job.id))?;
    let job = cancelled.unwrap_or(job);
    if job.status != JobStatus::Cancelled {
        let blocked = crate::jobs::StartBlocked::Completed { status: job.status };
        return Err(Problem::blocked(&blocked).with("job_id", job.id.to_string()));
    }
    let early = super::door::AnswerAs { early: true, ..Default::default() };
    super::door::answer::<Responses>(&state, &job, early).await
}
