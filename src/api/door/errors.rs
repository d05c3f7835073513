//! Every problem answered on a door's routes — whoever made it: a handler,
//! an extractor (401, 413), the `Idempotency-Key` check, the router — in
//! that door's error shape ([`Door::error`]), so its SDK's exception says
//! what happened rather than only a status; and a problem that names a job
//! (`job_id`) names it in `x-intentgate-job-id` too.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Map, Value};

use super::Door;
use crate::api::problem::ProblemMembers;
use crate::api::view::JOB_ID_HEADER;

/// The middleware for door `D`'s routes: a problem (whose members its
/// response carries, see [`ProblemMembers`]) is answered in `D`'s shape.
pub async fn door_errors<D: Door>(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let Some(ProblemMembers(problem)) = response.extensions_mut().remove::<ProblemMembers>() else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    if let Some(job_id) = problem.get("job_id").and_then(Value::as_str)
        && !parts.headers.contains_key(JOB_ID_HEADER)
        && let Ok(value) = HeaderValue::from_str(job_id)
    {
        parts.headers.insert(JOB_ID_HEADER, value);
    }
    let bytes = serde_json::to_vec(&D::error(problem)).unwrap_or_default();
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(D::ERROR_CONTENT_TYPE));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}

/// The slug of a problem's `type` URI (`idempotency-key-reused`).
pub fn slug(problem: &Map<String, Value>) -> Option<&str> {
    let kind = problem.get("type")?.as_str()?;
    Some(kind.strip_prefix(crate::api::PROBLEM_TYPE_BASE).unwrap_or(kind))
}
