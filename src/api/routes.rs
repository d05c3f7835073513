//! `GET /v1/routes`: each route's chain and, per provider, whether the
//! contract gate lets it serve the route, and why (R9).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::{AppState, Caller, Problem};

#[utoipa::path(
    get,
    path = "/v1/routes",
    tag = "operations",
    operation_id = "list_routes",
    summary = "The routes and their chains",
    description = "Each route's chain and, per provider, whether the contract gate lets it serve the \
        route, and why.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The routes", body = super::openapi::RouteList),
        (status = 401, response = super::openapi::Unauthorized),
        (status = 500, response = super::openapi::Internal),
        (status = 503, response = super::openapi::StoreUnavailable),
    )
)]
pub async fn list(State(state): State<AppState>, _caller: Caller) -> Result<Json<Value>, Problem> {
    let gate = state.engine.gate();
    gate.refresh(&state.store).await?;
    let routes: Vec<Value> = state
        .config
        .routes
        .iter()
        .map(|route| {
            let chain: Vec<Value> = route
                .chain
                .iter()
                .enumerate()
                .map(|(index, provider)| {
                    let verdict = gate.verdict(route, provider);
                    json!({
                        "provider": provider,
                        "role": if index == 0 { "primary" } else { "fallback" },
                        "contract_required": gate.check(route, provider, index).is_some(),
                        "eligible": verdict.is_eligible(),
                        "reason": verdict.reason(),
                    })
                })
                .collect();
            json!({
                "name": route.name,
                "chain": chain,
                "attempt_timeout": route.attempt_timeout.to_string(),
                "retries": route.retries,
                "contract_max_age": route.contract_max_age.to_string(),
            })
        })
        .collect();
    Ok(Json(json!({"routes": routes})))
}
