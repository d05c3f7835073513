//! The OpenAI-compatible surface: `POST /v1/chat/completions` and
//! `GET /v1/models`, a thin translation onto the jobs API — the same table,
//! fingerprint, guard and engine — so an OpenAI SDK gets intentgate's
//! guarantees by changing `base_url`.
//!
//! `model` names a route. The request becomes the job request
//! `{"route": model, "input": {"messages"}, "params": <every other field>}`
//! (with `"stream": true` kept in `params`, so a streamed and a plain request
//! are different intents). A succeeded job is answered from its stored
//! result, identically every time; a duplicate of a running job waits for it
//! (streams attach live); the wait is bounded by `[openai] wait`.

pub mod errors;
mod render;
mod schema;

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::idempotency::{IDEMPOTENCY_KEY, idempotency_key};
use super::submit::{invalid_messages, invalid_params, new_job, submit};
use super::view::JOB_ID_HEADER;
use super::{AppState, Caller, IDEMPOTENT_REPLAYED, Problem, ProblemType, StoreStage};
use crate::engine::{StreamEvent, Subscription};
use crate::jobs::{IdempotencyKey, Job, JobResult, JobStatus, validate_messages, validate_params};
use crate::store::StoreError;
use render::Completion;
pub use schema::{ChatCompletion, ChatCompletionRequest, ModelList};

pub const ATTEMPT_HEADER: &str = "x-intentgate-attempt";
/// The provider whose answer this is.
pub const PROVIDER_HEADER: &str = "x-intentgate-provider";
/// The model that provider says answered.
pub const MODEL_HEADER: &str = "x-intentgate-model";

/// `GET /v1/models`: the routes, as OpenAI lists models.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    operation_id = "list_models",
    summary = "The routes, as OpenAI lists models",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One model per route", body = schema::ModelList),
        (status = 401, response = super::problem::Unauthorized),
    )
)]
pub async fn models(State(state): State<AppState>, _caller: Caller) -> Json<Value> {
    let data: Vec<Value> = state.config.routes.iter().map(|route| model_object(&route.name)).collect();
    Json(json!({"object": "list", "data": data}))
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
) -> Result<Json<Value>, Problem> {
    match state.config.route(&id) {
        Some(route) => Ok(Json(model_object(&route.name))),
        None => Err(Problem::new(
            ProblemType::NotFound,
            format!("no model (route) `{id}`; GET /v1/models lists them"),
        )),
    }
}

fn model_object(route: &str) -> Value {
    json!({"id": route, "object": "model", "created": 0, "owned_by": "intentgate"})
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
                quoted form `\"abc\"` is accepted. Optional only with `[openai] mint_idempotency_keys \
                = true`, which gives each request without it a fresh key (and no deduplication)."),
    ),
    request_body(content = schema::ChatCompletionRequest),
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
        (status = 413, description = "`body-too-large`",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body`, `unknown-route`",
            body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`internal`, `stream-lagged`",
            body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "`upstream-failed`: every provider of the chain failed (`error_detail`)",
            body = Problem, content_type = "application/problem+json", headers(
                ("x-should-retry" = String, description = "`false`"),
        )),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn chat_completions(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(_) if !headers.contains_key(IDEMPOTENCY_KEY) && state.config.openai.mint_idempotency_keys => {
            IdempotencyKey::minted()
        }
        Err(problem) => return Err(problem),
    };
    let body = super::extract::read_body(body, state.max_body_bytes).await?;
    // Refusals before the job exists carry OpenAI's `error` member too, so
    // the SDK's exception says what was wrong.
    let (job_body, stream) = translate(&body).map_err(Problem::with_openai_error)?;
    let new = new_job(&state, &caller, key, job_body).map_err(Problem::with_openai_error)?;
    let wait: Duration = state.config.openai.wait.into();
    let submitted = submit(&state, &new, wait, stream).await.map_err(Problem::with_openai_error)?;
    let job_id = submitted.job.id;
    if let Some(live) = submitted.live {
        return stream_live(&state, submitted.job, live, submitted.replayed, wait).await;
    }
    let provider_time = super::jobs::provider_time(&submitted, true);
    let mut response = answer(&state, &submitted.job, submitted.winner, submitted.replayed, stream)
        .await
        .map_err(|problem| problem.with("job_id", job_id.to_string()))?;
    response.extensions_mut().insert(provider_time);
    Ok(response)
}

/// OpenAI request → job request body, and whether a stream was asked for.
fn translate(body: &Bytes) -> Result<(Value, bool), Problem> {
    let value = super::ijson::parse(body)?;
    super::text::refuse_nul_in_json(&value)?;
    let Value::Object(mut fields) = value else {
        return Err(invalid("the body must be a JSON object"));
    };
    let Some(Value::String(model)) = fields.remove("model") else {
        return Err(invalid("`model` (a route name; GET /v1/models lists them) is required"));
    };
    let Some(messages) = fields.remove("messages") else {
        return Err(invalid("`messages` is required"));
    };
    // Checked here, not only by `new_job`, so the path names `/messages` as
    // this caller sent it rather than the job body it becomes.
    validate_messages(&messages)
        .map_err(|err| invalid_messages(err.under("/messages"), "Invalid chat completion request"))?;
    let stream = match fields.get("stream") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {
            fields.remove("stream");
            false
        }
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(invalid("`stream` must be a boolean")),
    };
    validate_params(&fields).map_err(|err| invalid_params(err, "Invalid chat completion request"))?;
    let mut job = Map::new();
    job.insert("route".into(), Value::String(model));
    job.insert("input".into(), json!({"messages": messages}));
    if !fields.is_empty() {
        job.insert("params".into(), Value::Object(fields));
    }
    Ok((Value::Object(job), stream))
}

fn invalid(detail: &str) -> Problem {
    Problem::new(ProblemType::InvalidBody, detail).titled("Invalid chat completion request")
}

/// A store failure once the job exists (this request created or found it):
/// the post-commit problem, which names the job and says to retry under the
/// same key, with OpenAI's `error` member so the SDK's exception says so too.
fn after_commit(job_id: uuid::Uuid) -> impl Fn(StoreError) -> Problem {
    move |err| Problem::store(err, StoreStage::AfterCommit(job_id)).with_openai_error()
}

/// The answer for a job as it is now: its completion (or stream replay), or
/// the problem that says why there is none.
/// `winner` is the number of the attempt that completed the job, when the
/// caller knows it (else it is read).
async fn answer(
    state: &AppState,
    job: &Job,
    winner: Option<i32>,
    replayed: bool,
    stream: bool,
) -> Result<Response, Problem> {
    let winner = match (winner, job.completed_by) {
        (Some(number), _) => Some(number),
        (None, Some(id)) => state.store.attempt_number(id).await.map_err(after_commit(job.id))?,
        (None, None) => None,
    };
    if job.status != JobStatus::Succeeded {
        return Err(not_succeeded(state, job).await?);
    }
    let Some(result) = job.result.as_deref().and_then(JobResult::decode) else {
        tracing::error!(job_id = %job.id, "a succeeded job's result does not decode");
        return Err(Problem::new(
            ProblemType::Internal,
            "the job's stored result cannot be read; the error is in the gateway's log",
        ));
    };
    let completion = Completion::of(job);
    let (content_type, bytes) = if stream {
        ("text/event-stream", render::replay_stream(&completion, &result))
    } else {
        ("application/json", render::completion_body(&completion, &result))
    };
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    identify(headers, job, winner);
    name_provider(headers, &result.provider, result.model.as_deref());
    Ok(response)
}

/// Which provider and model answered: the body's `model` stays the route
/// the caller asked for.
fn name_provider(headers: &mut HeaderMap, provider: &str, model: Option<&str>) {
    if let Ok(value) = HeaderValue::from_str(provider) {
        headers.insert(PROVIDER_HEADER, value);
    }
    if let Some(value) = model.and_then(|model| HeaderValue::from_str(model).ok()) {
        headers.insert(MODEL_HEADER, value);
    }
}

/// Why a job has no completion to give (yet), as the SDKs should see it.
async fn not_succeeded(state: &AppState, job: &Job) -> Result<Problem, Problem> {
    let job_id = job.id.to_string();
    Ok(match job.status {
        JobStatus::Unknown => {
            let attempts = state.store.attempts(job.id).await.map_err(after_commit(job.id))?;
            let open = attempts.into_iter().find(|a| a.state.is_open());
            let mut problem = Problem::new(
                ProblemType::OutcomeUnknown,
                "the provider may have done this work but no answer came back; the job is blocked until the \
                 attempt is settled. Do not retry under a new key",
            );
            if let Some(attempt) = open {
                problem = problem.with("attempt_id", attempt.id.to_string()).with("attempt", attempt.number);
            }
            problem
        }
        JobStatus::Failed if failed_with(job, crate::engine::CONTENT_REFUSED) => Problem::new(
            ProblemType::ContentRefused,
            "the provider's content policy refused this request; the job's error has its reason",
        )
        .with("error_detail", job.error.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok())),
        JobStatus::Failed if failed_with(job, crate::engine::OUTCOME_UNKNOWN) => Problem::new(
            ProblemType::OutcomeUnknown,
            "the provider may have done this work but no answer came back, and no other provider may answer \
             it: the job has ended (a late answer is still recorded). Do not retry under a new key",
        )
        .with("error_detail", job.error.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok())),
        JobStatus::Failed => Problem::new(
            ProblemType::UpstreamFailed,
            "every provider of the route's chain failed; the job's error lists each reason",
        )
        .with("error_detail", job.error.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok())),
        JobStatus::Cancelled => {
            Problem::new(ProblemType::JobCompleted, "the job was cancelled and will not complete")
                .titled("Job cancelled")
        }
        JobStatus::Pending | JobStatus::Running | JobStatus::Succeeded => Problem::new(
            ProblemType::JobInProgress,
            "the job for this Idempotency-Key is still running; retry after the Retry-After delay to get its \
             answer",
        ),
    }
    .with("job_id", job_id)
    .with_openai_error())
}

/// Whether the job failed with error `code` (an attempt whose outcome is
/// unknown, a content refusal) rather than because every provider failed.
fn failed_with(job: &Job, code: &str) -> bool {
    let error = job.error.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok());
    error.is_some_and(|e| e["code"] == code)
}

fn identify(headers: &mut HeaderMap, job: &Job, attempt: Option<i32>) {
    if let Ok(value) = HeaderValue::from_str(&job.id.to_string()) {
        headers.insert(JOB_ID_HEADER, value);
    }
    if let Some(number) = attempt
        && let Ok(value) = HeaderValue::from_str(&number.to_string())
    {
        headers.insert(ATTEMPT_HEADER, value);
    }
}

/// A stream that is still being produced: the response starts at its first
/// chunk — until then a failure can still fail over, invisibly to the client.
async fn stream_live(
    state: &AppState,
    job: Job,
    subscription: Subscription,
    replayed: bool,
    wait: Duration,
) -> Result<Response, Problem> {
    let Subscription { backlog, live } = subscription;
    let mut events = stream::iter(backlog.into_iter().map(Ok)).chain(receive(live)).boxed();
    let first = match tokio::time::timeout(wait, events.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(problem))) => return Err(problem),
        Ok(None) | Err(_) => {
            let job = state.store.job(job.id).await.map_err(after_commit(job.id))?.unwrap_or(job);
            return answer(state, &job, None, replayed, true).await;
        }
    };
    let attempt = match &first {
        StreamEvent::Chunk { attempt, .. } | StreamEvent::Done { attempt, .. } => *attempt,
        StreamEvent::Failed { .. } => {
            // Nothing was sent yet: answer as a plain request would.
            let job = state.store.job(job.id).await.map_err(after_commit(job.id))?.unwrap_or(job);
            return answer(state, &job, None, replayed, true).await;
        }
    };
    let completion = Completion::of(&job);
    // The provider's chunks pass through as they came (every choice index,
    // tool-call fragments, the usage chunk), stamped with the job's identity.
    let body = stream::once(async move { Ok(first) }).chain(events).scan(false, move |ended, event| {
        if *ended {
            return futures_util::future::ready(None);
        }
        let bytes = match event {
            Ok(StreamEvent::Chunk { chunk, .. }) => render::chunk_event(&completion, &chunk),
            Ok(StreamEvent::Done { .. }) => {
                *ended = true;
                render::DONE_EVENT.to_vec()
            }
            Ok(StreamEvent::Failed { code, message, .. }) => {
                *ended = true;
                render::error_event(code, &message)
            }
            Err(problem) => {
                *ended = true;
                render::error_event(problem.slug(), "the stream reader fell behind")
            }
        };
        futures_util::future::ready(Some(Ok::<_, Infallible>(Bytes::from(bytes))))
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    identify(headers, &job, Some(attempt));
    if let Ok(Some(started)) = state.store.attempt(job.id, attempt).await {
        name_provider(response.headers_mut(), &started.provider, None);
    }
    Ok(response)
}

/// Live events until the stream's final one.
fn receive(
    live: broadcast::Receiver<StreamEvent>,
) -> impl futures_util::Stream<Item = Result<StreamEvent, Problem>> {
    stream::unfold(Some(live), |state| async move {
        let mut live = state?;
        match live.recv().await {
            Ok(event) => {
                let last = event.is_final();
                Some((Ok(event), if last { None } else { Some(live) }))
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                Some((Err(Problem::new(ProblemType::StreamLagged, "behind")), None))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}
