//! The Anthropic Messages door: `POST /v1/messages`, so the Anthropic SDKs
//! and Claude Code get intentgate's guarantees by changing the base URL.
//!
//! `model` names a route. The request becomes a job request in the job's
//! own terms (see [`translate`]), marked as this door's
//! (`"door": "anthropic-messages"`), so the key binds it as asked and a
//! replay answers as a `message` again. The answer is rendered from the
//! stored completion whichever dialect the provider spoke, so a route may
//! fail over from an Anthropic provider to an OpenAI one and the client
//! cannot tell. The caller authenticates with `x-api-key` (what the SDKs
//! send) or `Authorization: Bearer`; `anthropic-version` is accepted and
//! not needed. Errors are Anthropic's `{"type": "error", "error": {…}}`
//! with the problem's members beside it.

mod fields;
mod render;
mod translate;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::middleware;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value};

use super::door::errors::door_errors;
use super::door::{Door, Translated};
use super::{AppState, Caller, Problem, ProblemType};
use crate::jobs::{Entrance, Job, JobResult};

/// This door's routes; their problems answer in Anthropic's error shape.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route_layer(middleware::from_fn(door_errors::<Messages>))
}

/// This door's part of the OpenAPI document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(messages, count_tokens), components(schemas(MessagesError)))]
pub(super) struct Api;

/// The Messages door.
pub struct Messages;

impl Door for Messages {
    type Stream = render::EventStream;
    const ENTRANCE: Entrance = Entrance::Messages;
    const ERROR_CONTENT_TYPE: &'static str = "application/json";

    fn translate(body: &Bytes, headers: &HeaderMap) -> Result<Translated, Problem> {
        let fields = super::door::json_object(body, "Invalid Messages request")?;
        let (job, stream) = translate::to_job(fields, headers)?;
        Ok(Translated::new(job, stream))
    }

    fn settings(config: &crate::config::Config) -> &crate::config::DoorConfig {
        &config.anthropic
    }

    fn body(job: &Job, result: JobResult) -> Option<Vec<u8>> {
        render::message_body(&render::Identity::of(job), &result)
    }

    fn stream(job: &Job) -> render::EventStream {
        render::EventStream::new(render::Identity::of(job))
    }

    fn error(problem: Map<String, Value>) -> Map<String, Value> {
        render::error_body(problem)
    }
}

/// An error on the Messages door (for the OpenAPI document): Anthropic's
/// shape, the problem's members beside it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a schema only; the body is built by `render::error_body`
pub struct MessagesError {
    /// Always `error`.
    r#type: String,
    /// `{"type": "invalid_request_error" | …, "message", "code": <problem slug>}`.
    error: Object,
    /// The problem's `type` URI (`https://intentgate.dev/problems/<slug>`).
    problem_type: String,
    title: String,
    status: u16,
    detail: String,
}

/// A JSON object, for [`MessagesError`]'s schema.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct Object {}

/// `POST /v1/messages/count_tokens`: what a Messages request's prompt
/// comes to, before it is sent. Counted as reservations count it: the body
/// the route's first provider would be sent, with that provider's
/// tokenizer (or in bytes) — an upper bound, never less than the real
/// count. Creates no job and needs no `Idempotency-Key`. Counted off the
/// async workers, a bounded number at once (`engine::TokenCountSlots`).
#[utoipa::path(
    post,
    path = "/v1/messages/count_tokens",
    tag = "anthropic",
    operation_id = "count_message_tokens",
    summary = "Count a Messages request's input tokens (an upper bound)",
    security(("bearer" = []), ("x-api-key" = [])),
    request_body(content = Object, description = "A Messages request; `max_tokens` may be left out."),
    responses(
        (status = 200, description = "`{\"input_tokens\": N}`", body = Object),
        (status = 401, description = "`unauthorized`", body = MessagesError, content_type = "application/json"),
        (status = 422, description = "`invalid-body` (with `path`), `unknown-route`",
            body = MessagesError, content_type = "application/json"),
        (status = 503, description = "`tokenizer-busy`: as many counts as the gateway runs at once are \
            running; `Retry-After: 1`", body = MessagesError, content_type = "application/json"),
    )
)]
pub async fn count_tokens(
    State(state): State<AppState>,
    _caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<axum::Json<Value>, Problem> {
    let body = super::extract::read_body(body, state.max_body_bytes).await?;
    let mut fields = super::door::json_object(&body, "Invalid Messages request")?;
    fields.entry("max_tokens").or_insert(1.into());
    fields.remove("stream");
    let (request, _) = translate::to_job(fields, &headers)?;
    let config = state.config();
    let Some(route) = config.route_named(&request.route) else {
        return Err(Problem::model_not_found(&request.route, &config));
    };
    let prepared = crate::engine::PreparedRequest::new(&request, 0)
        .map_err(|err| Problem::new(ProblemType::InvalidBody, err.to_string()))?;
    let tokens = state.engine.count_prompt_tokens(&route.name, prepared).await.map_err(Problem::count)?;
    let tokens = tokens.unwrap_or(0);
    Ok(axum::Json(serde_json::json!({"input_tokens": tokens})))
}

/// `POST /v1/messages`.
#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "anthropic",
    operation_id = "create_message",
    summary = "Create a message (Anthropic-compatible), as one idempotent job",
    description = "Creates or attaches to a job exactly as `POST /v1/chat/completions` does, from an \
        Anthropic Messages request: `system`, text and image blocks, `tools`, `tool_choice`, `tool_use` \
        and `tool_result` blocks, `stop_sequences`, `metadata.user_id`, `max_tokens` (required), \
        `temperature`, `top_p`, `top_k`, `stream`. Another field is refused by name. With `stream: true` \
        the answer is Anthropic's event stream (`message_start` … `message_stop`); a stream broken after \
        its first byte ends with an `error` event. Errors are `{\"type\": \"error\", \"error\": \
        {\"type\", \"message\"}}` with the problem's members beside it.",
    security(("bearer" = []), ("x-api-key" = [])),
    params(
        ("Idempotency-Key" = String, Header, min_length = 1,
            description = "Names the intent, as on `POST /v1/chat/completions`."),
        ("anthropic-version" = Option<String>, Header, description = "Accepted; not needed."),
    ),
    request_body(content = Object, description = "An Anthropic Messages request; `model` names a route."),
    responses(
        (status = 200, description = "The message (or its event stream)",
            content((Object = "application/json"), (String = "text/event-stream"))),
        (status = 400, description = "`idempotency-key-missing`, `idempotency-key-invalid`, `malformed-json`",
            body = MessagesError, content_type = "application/json"),
        (status = 401, description = "`unauthorized`: no key, an unknown one, or both `x-api-key` and `Authorization`",
            body = MessagesError, content_type = "application/json"),
        (status = 409, description = "`idempotency-key-reused`, `outcome-unknown`, `job-completed`, `job-in-progress`; with `job_id`",
            body = MessagesError, content_type = "application/json"),
        (status = 413, description = "`body-too-large`",
            body = MessagesError, content_type = "application/json"),
        (status = 422, description = "`invalid-body` (with `path`), `unknown-route`",
            body = MessagesError, content_type = "application/json"),
        (status = 429, description = "`rate-limited`, `budget-exhausted`",
            body = MessagesError, content_type = "application/json"),
        (status = 502, description = "`upstream-failed`",
            body = MessagesError, content_type = "application/json"),
        (status = 503, description = "`store-unavailable`",
            body = MessagesError, content_type = "application/json"),
    )
)]
pub async fn messages(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, Problem> {
    super::door::serve::<Messages>(&state, &caller, request).await
}
