//! The HTTP surface: routing, authentication, the `Idempotency-Key` header
//! and problem+json errors. Handlers translate HTTP into calls on the store
//! (and, for execution, the engine); no rule of the domain is decided here.
//!
//! Layers a request passes, outermost first: tracing of method, path, status
//! and latency → the router (unknown path 404, wrong method 405, both as
//! problem+json) → the `Caller` extractor (401) → the handler, which reads
//! the body within `server.max_body_bytes` (413).

mod attempts;
mod auth;
mod health;
mod idempotency;
mod jobs;
mod openai;
mod prefer;
mod problem;
mod routes;
mod submit;
mod view;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

pub use auth::Caller;
pub use idempotency::IDEMPOTENCY_KEY;
pub use jobs::IDEMPOTENT_REPLAYED;
pub use problem::{PROBLEM_TYPE_BASE, Problem};

use crate::auth::Principals;
use crate::config::Config;
use crate::engine::Engine;
use crate::store::Store;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub engine: Engine,
    pub principals: Arc<Principals>,
    pub max_body_bytes: usize,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/jobs", get(jobs::find_by_key).post(jobs::create))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/jobs/{id}/attempts", post(attempts::start))
        .route("/v1/jobs/{id}/attempts/{number}/resolve", post(attempts::resolve))
        .route("/v1/jobs/{id}/cancel", post(attempts::cancel))
        .route("/v1/providers/{name}/resolve", post(attempts::resolve_provider))
        .route("/v1/routes", get(routes::list))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(middleware::from_fn(trace_request))
}

async fn not_found() -> Problem {
    Problem::not_found("no such endpoint")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        "this endpoint does not accept this method",
    )
}

async fn trace_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    tracing::debug!(%method, %path, status = response.status().as_u16(), elapsed_ms = started.elapsed().as_secs_f64() * 1e3, "request");
    response
}
