//! Liveness and readiness.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::{AppState, Problem};

/// `GET /healthz`: the process is up and serving.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the job store answers too.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, Problem> {
    state.store.ping().await?;
    Ok(Json(json!({"status": "ready", "store": state.store.backend()})))
}
