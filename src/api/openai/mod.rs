//! The OpenAI-compatible door: `POST /v1/chat/completions` and
//! `GET /v1/models`, a thin translation onto the jobs API — the same table,
//! fingerprint, guard and engine — so an OpenAI SDK gets intentgate's
//! guarantees by changing `base_url`.
//!
//! `model` names a route. The request becomes the job request
//! `{"route": model, "input": {"messages"}, "params": <every other field>}`
//! (with `"stream": true` kept in `params` for the driver, but left out of
//! the fingerprint: a streamed and a plain request are one intent, see
//! `JobRequest::DELIVERY_PARAMS`). A succeeded job is answered from its stored
//! result, identically every time; a duplicate of a running job waits for it
//! (streams attach live); the wait is bounded by `[openai] wait`. The flow
//! between is the door seam's (`api::door::serve`); this module is the
//! translation, [`ChatCompletions`].

mod render;
mod request;
mod schema;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value};

use super::door::errors::door_errors;
use super::door::{Door, Translated};
use super::{AppState, Caller, Problem, ProblemType};
use crate::jobs::{Entrance, Job, JobResult};
pub use render::error_body;
pub use request::ChatCompletionRequest;
pub use schema::{AnthropicModelList, ChatCompletion, ModelList};

/// This door's routes; their problems answer in OpenAI's error shape.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route_layer(middleware::from_fn(door_errors::<ChatCompletions>))
}

/// This door's part of the OpenAPI document.
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(chat_completions, models, model),
    components(schemas(ModelList, AnthropicModelList, ChatCompletionRequest, ChatCompletion))
)]
pub(super) struct Api;

/// The chat completions door.
pub struct ChatCompletions;

impl Door for ChatCompletions {
    type Stream = render::ChunkStream;
    const ENTRANCE: Entrance = Entrance::ChatCompletions;

    fn translate(body: &Bytes, _headers: &axum::http::HeaderMap) -> Result<Translated, Problem> {
        Translated::try_from(ChatCompletionRequest::read(body)?)
    }

    fn body(job: &Job, result: JobResult) -> Option<Vec<u8>> {
        render::completion_body(&render::Completion::of(job), result)
    }

    fn stream(job: &Job) -> render::ChunkStream {
        render::ChunkStream::new(render::Completion::of(job))
    }

    fn error(problem: Map<String, Value>) -> Map<String, Value> {
        render::error_body(problem)
    }
}

/// `GET /v1/models`: the routes, as OpenAI lists models.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    operation_id = "list_models",
    summary = "The routes, as OpenAI lists models (as Anthropic does, with `anthropic-version`)",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One model per route", body = schema::ModelList),
        (status = 401, response = super::problem::Unauthorized),
    )
)]
pub async fn models(State(state): State<AppState>, _caller: Caller, headers: HeaderMap) -> Response {
    let config = state.config();
    let names = config.routes.iter().flat_map(|route| std::iter::once(&route.name).chain(&route.aliases));
    let names: Vec<&str> = names.map(String::as_str).collect();
    if headers.contains_key("anthropic-version") {
        // An Anthropic SDK listing models: its list shape.
        return Json(schema::AnthropicModelList::of(&names)).into_response();
    }
    Json(schema::ModelList { object: "list", data: names.into_iter().map(schema::Model::of).collect() })
        .into_response()
}

/// `GET /v1/models/{id}`: one route, as OpenAI describes a model.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    tag = "openai",
    operation_id = "retrieve_model",
    summary = "One route, as OpenAI describes a model",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "A route name")),
    responses(
        (status = 200, description = "The route", body = schema::Model),
        (status = 401, response = super::problem::Unauthorized),
        (status = 404, description = "`not-found`: no such route",
            body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn model(
    State(state): State<AppState>,
    _caller: Caller,
    super::extract::PathParams(id): super::extract::PathParams<String>,
) -> Result<Response, Problem> {
    match state.config().route_named(&id) {
        Some(_) => Ok(Json(schema::Model::of(&id)).into_response()),
        None => Err(Problem::new(
            ProblemType::NotFound,
            format!("no model (route) `{id}`; GET /v1/models lists them"),
        )),
    }
}

/// `POST /v1/chat/completions`.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    operation_id = "create_chat_completion",
    summary = "Create a chat completion (OpenAI-compatible), as one idempotent job",
    description = "Creates or attaches to a job exactly as `POST /v1/jobs` does: the request becomes \
        `{\"route\": model, \"input\": {\"messages\"}, \"params\": {every other field}}`. A completed \
        job's response is replayed byte for byte. A duplicate of a running job waits for it (streams \
        attach live) up to `[openai] wait`. With `stream: true` the answer is server-sent events in \
        OpenAI's chunk format ending with `data: [DONE]`; a stream broken after its first byte ends \
        with an in-band `{\"error\": {...}}` event and no `[DONE]`. Problems carry an OpenAI-style \
        `error` member.",
    security(("bearer" = [])),
    params(
        ("Idempotency-Key" = String, Header, min_length = 1,
            description = "Names the intent: 1–255 visible ASCII characters, sent once; the RFC 8941 \
                quoted form `\"abc\"` is accepted. Optional: without it the route's `keyless` \
                decides (by default a key derived from the caller and the request, so a retry is the same job)."),
    ),
    request_body(content = ChatCompletionRequest),
    responses(
        (status = 200, description = "The completion (or its stream)",
            content(
                (schema::ChatCompletion = "application/json"),
                (String = "text/event-stream"),
            ),
            headers(
                ("Idempotent-Replayed" = String,
                    description = "`true` when an earlier request's answer is replayed"),
                ("x-intentgate-job-id" = String, description = "The job's id"),
                ("x-intentgate-attempt" = String, description = "The number of the attempt that answered"),
            )),
        (status = 400, description = "`idempotency-key-missing`, `idempotency-key-invalid`, `malformed-json`",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 409, description = "`idempotency-key-reused`, `outcome-unknown` (do not retry under a new \
            key), `job-completed` (cancelled), `job-in-progress` (retry after `Retry-After`); with `job_id`",
            body = Problem, content_type = "application/problem+json", headers(
                ("x-should-retry" = String, description = "`false`, except on `job-in-progress`"),
                ("Retry-After" = String, description = "`1` (seconds), on `job-in-progress`"),
        )),
        (status = 413, response = super::problem::BodyTooLarge),
        (status = 422, description = "`invalid-body`, `unknown-route`",
            body = Problem, content_type = "application/problem+json"),
        (status = 429, response = super::problem::LimitReached),
        (status = 500, description = "`internal`",
            body = Problem, content_type = "application/problem+json"),
        (status = 502, response = super::problem::UpstreamFailed),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn chat_completions(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, Problem> {
    super::door::serve::<ChatCompletions>(&state, &caller, request).await
}
