//! Liveness and readiness.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::{AppState, Problem};

/// `GET /healthz`: the process is up and serving.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "healthz",
    summary = "Liveness: the process is up",
    description = "Needs no API key.",
    responses((status = 200, description = "Up", body = Health))
)]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the job store answers too — on SQLite both a reader and
/// the writer thread, so a writer that stopped or is stuck fails it.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "readyz",
    summary = "Readiness: the job store answers too",
    description = "Needs no API key. On SQLite both reads and the writer thread must answer (within \
        `[store] acquire_timeout`).",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    if state.engine.tasks().is_draining() {
        return Err(Problem::new(
            super::ProblemType::Draining,
            "this replica is shutting down: it finishes its jobs and late answers and takes no new requests",
        ));
    }
    state.store.ping().await.map_err(|err| Problem::store(err, super::StoreStage::Lookup))?;
    Ok(Json(
        json!({"status": "ready", "store": state.store.backend(), "config_version": state.config().version}),
    ))
}

// Schema-only types for the OpenAPI document, never constructed: the answers
// above are built as `json!` values of these shapes.

/// `GET /healthz`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct Health {
    /// `ok`
    status: String,
}

/// `GET /readyz`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct Ready {
    /// `ready`
    status: String,
    /// `sqlite` or `postgres`
    store: String,
    /// The configuration this replica runs: the first 12 hex digits of the
    /// SHA-256 of its file.
    config_version: String,
}
