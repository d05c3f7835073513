//! `GET /v1/routes`: the configured routes and their chains.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::{AppState, Caller};

pub async fn list(State(state): State<AppState>, _caller: Caller) -> Json<Value> {
    let routes: Vec<Value> = state
        .config
        .routes
        .iter()
        .map(|route| {
            json!({
                "name": route.name,
                "chain": route.chain,
                "attempt_timeout": route.attempt_timeout.to_string(),
                "retries": route.retries,
            })
        })
        .collect();
    Json(json!({"routes": routes}))
}
