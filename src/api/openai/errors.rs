//! The OpenAI surface's errors, as OpenAI SDKs read them. Every problem
//! answered on `/v1/chat/completions` and `/v1/models` — whoever made it: a
//! handler, an extractor (401, 413), the Idempotency-Key check — gets
//! OpenAI's `error` member (`message`, `type`, `code`) beside the
//! problem+json fields, so an SDK's exception says what happened rather than
//! only "Error code: 409"; and a problem that names a job (`job_id`) names
//! it in `x-intentgate-job-id` too.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::api::PROBLEM_TYPE_BASE;
use crate::api::view::JOB_ID_HEADER;

/// Problem bodies are small; anything larger is passed on untouched.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

pub async fn openai_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/problem+json"));
    if !is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PROBLEM_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(mut problem) = serde_json::from_slice::<Map<String, Value>>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    if !problem.contains_key("error") {
        let slug = problem
            .get("type")
            .and_then(Value::as_str)
            .map(|kind| kind.strip_prefix(PROBLEM_TYPE_BASE).unwrap_or(kind).to_owned());
        let message = problem.get("detail").cloned().unwrap_or(Value::Null);
        problem.insert("error".into(), json!({"message": message, "type": slug, "code": slug}));
    }
    if let Some(job_id) = problem.get("job_id").and_then(Value::as_str)
        && !parts.headers.contains_key(JOB_ID_HEADER)
        && let Ok(value) = HeaderValue::from_str(job_id)
    {
        parts.headers.insert(JOB_ID_HEADER, value);
    }
    let bytes = serde_json::to_vec(&problem).unwrap_or_else(|_| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}
