//! The router: every surface's routes collected (each door declares its
//! own, see its `routes`), and the layers every request passes — tracing,
//! the body's deadline and limit, the headers on every answer, 404 and 405
//! as problems.

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, patch, post};
use tracing::Instrument;

use super::{
    AppState, Problem, ProblemType, anthropic, attempts, browse, console, contracts, deadline, embeddings,
    health, jobs, keys, limits, metrics, openai, openapi, queue, reload, responses, routes, usage,
};

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
        .route("/v1/usage/spend", get(usage::spend))
        .route("/v1/contracts", get(contracts::list))
        .route("/v1/overview", get(browse::overview))
        .route("/v1/whoami", get(browse::whoami))
        .route("/v1/admin/reload", post(reload::reload_config))
        .route("/v1/admin/keys", get(keys::list).post(keys::create))
        .route("/v1/admin/keys/audit", get(keys::audit))
        .route("/v1/admin/keys/{id}", get(keys::get).patch(keys::update).delete(keys::delete))
        .route("/v1/admin/keys/{id}/rotate", post(keys::rotate))
        .route("/v1/admin/keys/{id}/revoke", post(keys::revoke))
        .route("/v1/admin/limits", get(limits::list).post(limits::create))
        .route("/v1/admin/limits/audit", get(limits::audit))
        .route("/v1/admin/limits/{id}", patch(limits::update).delete(limits::remove))
        .route("/console", get(console::page_handler))
        .route("/console/console.js", get(console::script_handler))
        .route("/console/console.css", get(console::style_handler))
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::document))
        .merge(openai::routes())
        .merge(responses::routes())
        .merge(embeddings::routes())
        .merge(anthropic::routes())
        .route_layer(middleware::from_fn(trace_request))
        .route_layer(middleware::from_fn_with_state(body_read_timeout, deadline::body_deadline))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(protective_headers))
        .layer(body_limit)
        .with_state(state)
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
