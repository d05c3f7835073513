//! The HTTP surface: routing, authentication, the `Idempotency-Key` header
//! and problem+json errors. Handlers translate HTTP into calls on the store
//! (and, for execution, the engine); no rule of the domain is decided here.
//!
//! Layers a request passes, outermost first: tracing of method, path, status
//! and latency → the router (unknown path 404, wrong method 405, both as
//! problem+json) → the `Caller` extractor (401) → the handler, which reads
//! the body within `server.max_body_bytes` (413, at once when `Content-Length`
//! says so; 400 when the body cannot be read) and, from the headers,
//! `server.body_read_timeout` (408, see `deadline`), through `extract`'s
//! extractors, whose rejections are problem+json too.

mod anthropic;
mod attempts;
mod auth;
mod browse;
mod console;
mod contracts;
mod deadline;
mod door;
mod embeddings;
mod extract;
mod health;
mod idempotency;
mod ijson;
mod jobs;
mod keys;
mod metrics;
mod openai;
mod openapi;
mod prefer;
mod problem;
mod queue;
pub mod reload;
mod responses;
mod routes;
mod submit;
mod text;
mod usage;
pub use usage::usage_body;
mod view;

use std::sync::Arc;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tracing::Instrument;

pub use auth::Caller;
pub use idempotency::IDEMPOTENCY_KEY;
pub use jobs::IDEMPOTENT_REPLAYED;
pub use problem::{PROBLEM_TYPE_BASE, Problem, ProblemType, StoreStage};

use crate::auth::Principals;
use crate::config::Config;
use crate::engine::Engine;
use crate::store::Store;

/// What every handler can reach: one `Arc`, since axum clones the state
/// for every request (several times, once per layer that holds it), and
/// each clone of the parts is an atomic count shared by every core.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The parts of [`AppState`].
pub struct Shared {
    pub live: Live,
    /// The stored API keys, as the request path looks them up.
    pub keys: crate::auth::StoredKeys,
    pub store: Store,
    pub engine: Engine,
    pub max_body_bytes: usize,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }

    /// The configuration now (a reload swaps it; see [`Live`]).
    pub fn config(&self) -> Arc<Config> {
        self.live.now().0
    }

    /// The API keys now, as principals.
    pub fn principals(&self) -> Arc<Principals> {
        self.live.now().1
    }
}

/// The configuration and principals the doors read, swapped together by a
/// reload (`app::Reloader`): a request reads one pair, never half of each.
/// The engine keeps its own snapshot (see `engine::reload`).
#[derive(Clone)]
pub struct Live(Arc<std::sync::RwLock<(Arc<Config>, Arc<Principals>)>>);

impl Live {
    pub fn new(config: Config, principals: Principals) -> Live {
        Live(Arc::new(std::sync::RwLock::new((Arc::new(config), Arc::new(principals)))))
    }

    pub fn now(&self) -> (Arc<Config>, Arc<Principals>) {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Makes `config` and `principals` what every request from now on reads.
    pub fn replace(&self, config: Config, principals: Principals) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            (Arc::new(config), Arc::new(principals));
    }
}

pub fn router(state: AppState) -> Router {
    // Every body, whoever reads it, within `server.max_body_bytes` (the
    // handlers' own reads use `extract::read_body` with the same limit).
    let body_limit = DefaultBodyLimit::max(state.max_body_bytes);
    let body_read_timeout: Duration = state.config().server.body_read_timeout.into();
    Router::new()
        .route("/v1/jobs", get(jobs::find_by_key).post(jobs::create))
        .route("/v1/jobs/search", get(browse::search))
        .route("/v1/jobs/counts", get(browse::counts))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/jobs/{id}/attempts", post(attempts::start))
        .route("/v1/jobs/{id}/attempts/{number}/resolve", post(attempts::resolve))
        .route("/v1/jobs/{id}/cancel", post(attempts::cancel))
        .route("/v1/providers/{name}/resolve", post(attempts::resolve_provider))
        .route("/v1/attempts/unknown", get(queue::unknown))
        .route("/v1/routes", get(routes::list))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/contracts", get(contracts::list))
        .route("/v1/overview", get(browse::overview))
        .route("/v1/whoami", get(browse::whoami))
        .route("/v1/admin/reload", post(reload::reload_config))
        .route("/v1/admin/keys", get(keys::list).post(keys::create))
        .route("/v1/admin/keys/audit", get(keys::audit))
        .route("/v1/admin/keys/{id}", get(keys::get).patch(keys::update).delete(keys::delete))
        .route("/v1/admin/keys/{id}/rotate", post(keys::rotate))
        .route("/v1/admin/keys/{id}/revoke", post(keys::revoke))
        .route("/console", get(console::page_handler))
        .route("/console/console.js", get(console::script_handler))
        .route("/console/console.css", get(console::style_handler))
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::document))
        .merge(openai_routes())
        .merge(anthropic_routes())
        .route_layer(middleware::from_fn(trace_request))
        .route_layer(middleware::from_fn_with_state(body_read_timeout, deadline::body_deadline))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(protective_headers))
        .layer(body_limit)
        .with_state(state)
}

/// The OpenAI-compatible door: its problems also speak OpenAI's `error`
/// shape (see `door::errors`).
fn openai_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/responses/{id}", get(responses::retrieve))
        .route("/v1/responses/{id}/input_items", get(responses::input_items))
        .route("/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{id}", get(openai::model))
        .route_layer(middleware::from_fn(door::errors::door_errors::<openai::ChatCompletions>))
}

/// The Anthropic-compatible door: its problems speak Anthropic's error
/// shape (see `door::errors`).
fn anthropic_routes() -> Router<AppState> {
    Router::new()
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route_layer(middleware::from_fn(door::errors::door_errors::<anthropic::Messages>))
}

/// On every answer: `X-Content-Type-Options: nosniff` (a browser never
/// reads a JSON body, a problem or a stored completion as a page), and
/// `Cache-Control: no-store` unless the handler chose a policy (the
/// console's assets do): answers carry prompts, completions and spend,
/// which no shared cache may keep.
async fn protective_headers(request: Request, next: Next) -> Response {
    use axum::http::{HeaderValue, header};
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// With OpenAI's `error` member too: an SDK pointed at a path this gateway
/// does not serve (an endpoint it lacks) says so, rather than "no body".
async fn not_found() -> Problem {
    let detail = "no such endpoint";
    Problem::new(ProblemType::NotFound, detail).with(
        "error",
        serde_json::json!({"message": detail, "type": "invalid_request_error", "param": null,
            "code": "not-found"}),
    )
}

async fn method_not_allowed() -> Problem {
    Problem::new(ProblemType::MethodNotAllowed, "this endpoint does not accept this method")
}

/// One span per request; the gateway-overhead histogram (request time
/// minus the provider time the handler reported).
async fn trace_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |matched| matched.as_str().to_owned());
    let span = tracing::info_span!("request", %method, %path, status = tracing::field::Empty);
    crate::traces::continue_trace(&span, method.as_str(), &path, request.headers());
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let provider_time =
        response.extensions().get::<metrics::ProviderTime>().map_or(Some(Duration::ZERO), |t| t.0);
    if let Some(provider_time) = provider_time {
        ::metrics::histogram!(crate::telemetry::OVERHEAD, "path" => path.clone())
            .record(elapsed.saturating_sub(provider_time).as_secs_f64());
    }
    let status = response.status().as_u16();
    ::metrics::counter!(crate::telemetry::HTTP_REQUESTS, "path" => path.clone(), "status" => status.to_string())
        .increment(1);
    span.record("status", status);
    crate::traces::record_status(&span, status);
    span.in_scope(|| tracing::debug!(elapsed_ms = elapsed.as_secs_f64() * 1e3, "request done"));
    response
}
