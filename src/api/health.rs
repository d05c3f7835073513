//! Liveness and readiness.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

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
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
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
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Ready>, Problem> {
    if state.engine.tasks().is_draining() {
        return Err(Problem::new(
            super::ProblemType::Draining,
            "this replica is shutting down: it finishes its jobs and late answers and takes no new requests",
        ));
    }
    state.store.ping().await.map_err(|err| Problem::store(err, super::StoreStage::Lookup))?;
    Ok(Json(Ready {
        status: "ready",
        store: state.store.backend(),
        config_version: state.config().version.clone(),
    }))
}

/// `GET /healthz`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`
    status: &'static str,
}

/// `GET /readyz`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Ready {
    /// `ready`
    status: &'static str,
    /// `sqlite` or `postgres`
    store: &'static str,
    /// The configuration this replica runs: the first 12 hex digits of the
    /// SHA-256 of its file.
    config_version: String,
}
