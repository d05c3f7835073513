//! The OpenAI embeddings door: `POST /v1/embeddings`, one job per intent
//! like every other door, so a retried batch of embeddings is embedded (and
//! paid for) once.
//!
//! `model` names a route. The request becomes the job request
//! `{"route": model, "input": {"embed": input}, "params": {dimensions,
//! encoding_format, user}, "door": "openai-embeddings"}`; the answer is the
//! provider's embeddings list as it answered (its `model` the one that
//! answered), the same bytes on every replay. Embeddings are not streamed; a provider
//! whose dialect has no embeddings (Anthropic's) is passed over with the
//! reason, as for any request a dialect cannot express.

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::State;
use axum::middleware;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value, json};

use super::door::errors::door_errors;
use super::door::{Door, Expected, MODEL, StreamRender, Translated};
use super::{AppState, Caller, Problem};
use crate::jobs::{DoorName, Entrance, Job, JobRequest, JobResult, validate_embedding};

/// This door's routes; their problems answer in OpenAI's error shape.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route_layer(middleware::from_fn(door_errors::<Embeddings>))
}

/// This door's part of the OpenAPI document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(embeddings))]
pub(super) struct Api;

const TITLE: &str = "Invalid embeddings request";

/// The fields OpenAI's embeddings request has.
const FIELDS: &[&str] = &["model", "input", "dimensions", "encoding_format", "user"];

/// The embeddings door.
pub struct Embeddings;

impl Door for Embeddings {
    type Stream = Unstreamed;
    const ENTRANCE: Entrance = Entrance::Embeddings;

    fn translate(body: &Bytes, _headers: &axum::http::HeaderMap) -> Result<Translated, Problem> {
        Translated::try_from(read(body)?)
    }

    /// The provider's list as it answered, naming the model that answered
    /// (the route when the provider named none).
    fn body(job: &Job, result: JobResult) -> Option<Vec<u8>> {
        let mut list = result.completion?;
        let fields = list.as_object_mut()?;
        if fields.get("model").and_then(Value::as_str).is_none_or(str::is_empty) {
            fields.insert("model".into(), job.route.clone().into());
        }
        serde_json::to_vec(&list).ok()
    }

    fn stream(_job: &Job) -> Unstreamed {
        Unstreamed
    }

    fn error(problem: Map<String, Value>) -> Map<String, Value> {
        super::openai::error_body(problem)
    }
}

/// The renderer of a stream this door never opens ([`translate`] refuses
/// `stream`); it says so if it is ever asked.
pub struct Unstreamed;

impl StreamRender for Unstreamed {
    fn chunk(&mut self, _chunk: &Value) -> Vec<u8> {
        Vec::new()
    }

    fn done(&mut self) -> Vec<u8> {
        Vec::new()
    }

    fn failed(&mut self, code: &str, message: &str) -> Vec<u8> {
        let event = json!({"error": {"code": code, "message": message}});
        format!("data: {event}\n\n").into_bytes()
    }
}

/// `POST /v1/embeddings`.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "openai",
    operation_id = "create_embedding",
    summary = "Create embeddings (OpenAI-compatible), as one idempotent job",
    description = "Creates or finds a job as `POST /v1/jobs` does: the request becomes `{\"route\": model, \
        \"input\": {\"embed\": input}, \"params\": {dimensions, encoding_format, user}}`. A completed \
        job's list is replayed byte for byte. Fields OpenAI's request does not have are refused (422 \
        with `path`). Problems carry an OpenAI-style `error` member.",
    security(("bearer" = [])),
    params(
        ("Idempotency-Key" = String, Header, min_length = 1,
            description = "Names the intent, as for chat completions (or as the route's `keyless` says)"),
    ),
    request_body(content = Object, description = "OpenAI's `CreateEmbeddingRequest`"),
    responses(
        (status = 200, description = "OpenAI's embeddings list", body = Object, headers(
            ("Idempotent-Replayed" = String, description = "`true` when an earlier request's answer is replayed"),
            ("x-intentgate-job-id" = String, description = "The job's id"),
        )),
        (status = 400, description = "`idempotency-key-missing`, `idempotency-key-invalid`, `malformed-json`",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 409, description = "`idempotency-key-reused`, `outcome-unknown`, `job-in-progress`",
            body = Problem, content_type = "application/problem+json"),
        (status = 413, response = super::problem::BodyTooLarge),
        (status = 422, description = "`invalid-body` (with `path`), `unknown-route`",
            body = Problem, content_type = "application/problem+json"),
        (status = 429, response = super::problem::LimitReached),
        (status = 500, response = super::problem::Internal),
        (status = 502, response = super::problem::UpstreamFailed),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn embeddings(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<Response, Problem> {
    super::door::serve::<Embeddings>(&state, &caller, request).await
}

/// OpenAI's embeddings request: `model` names a route; its other fields
/// (`dimensions`, `encoding_format`, `user`) are the job's parameters.
#[derive(serde::Deserialize)]
struct EmbeddingsRequest {
    model: String,
    input: Value,
    #[serde(flatten)]
    params: Map<String, Value>,
}

/// The fields this door reads by name.
const EXPECTED: [Expected; 2] = [
    MODEL,
    Expected::required("input", "a string, an array of strings, or token ids", |input| !input.is_null()),
];

/// The body → the request: only OpenAI's fields, any other refused by
/// name, as OpenAI refuses it, rather than bound to the key unread.
fn read(body: &Bytes) -> Result<EmbeddingsRequest, Problem> {
    let fields = super::door::json_object(body, TITLE)?;
    if let Some(unknown) = fields.keys().find(|name| !FIELDS.contains(&name.as_str())) {
        let reason = match unknown.as_str() {
            "stream" => "embeddings are not streamed".to_owned(),
            other => format!("`{other}` is not a field of an embeddings request"),
        };
        return Err(Problem::invalid_field(TITLE, reason, format!("/{unknown}")));
    }
    super::door::typed(fields, TITLE, &EXPECTED)
}

impl TryFrom<EmbeddingsRequest> for Translated {
    type Error = Problem;

    fn try_from(request: EmbeddingsRequest) -> Result<Self, Problem> {
        let EmbeddingsRequest { model, input, params } = request;
        validate_embedding(&input, &params).map_err(|err| {
            let path = if err.path.is_empty() { "/input" } else { "" };
            Problem::invalid_params(err.under(path), TITLE)
        })?;
        let job = JobRequest::embed(model, input, params).through(DoorName::OpenAiEmbeddings, None);
        Ok(Translated::new(job, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(body: Value) -> Result<Value, String> {
        let bytes = Bytes::from(body.to_string());
        let translated = read(&bytes).and_then(Translated::try_from);
        let job = translated.map(|t| t.job).map_err(|problem| format!("{problem:?}"))?;
        serde_json::to_value(job).map_err(|err| err.to_string())
    }

    #[test]
    fn a_request_becomes_an_embed_job_of_this_door() {
        let job = translated(json!({"model": "embeddings", "input": ["a", "b"], "dimensions": 8}));
        assert_eq!(
            job,
            Ok(json!({"route": "embeddings", "input": {"embed": ["a", "b"]}, "params": {"dimensions": 8},
                "door": "openai-embeddings"}))
        );
    }

    #[test]
    fn what_openai_would_refuse_is_refused_with_its_path() {
        for (body, path) in [
            (json!({"model": "e", "input": "a", "stream": true}), "/stream"),
            (json!({"model": "e", "input": "a", "temperature": 1}), "/temperature"),
            (json!({"model": "e", "input": ""}), "/input"),
            (json!({"model": "e", "input": "a", "dimensions": -1}), "/dimensions"),
            (json!({"input": "a"}), "/model"),
            (json!({"model": "e"}), "/input"),
        ] {
            let refused = translated(body.clone()).err().unwrap_or_default();
            assert!(refused.contains(&format!("\"{path}\"")), "{body}: {refused}");
        }
    }
}
