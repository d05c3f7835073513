//! `GET /v1/routes`: each route's chain and, per provider, whether the
//! contract gate lets it serve the route, and why (R9), and its health.

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
        (status = 200, description = "The routes", body = RouteList),
        (status = 401, response = super::problem::Unauthorized),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn list(State(state): State<AppState>, _caller: Caller) -> Result<Json<Value>, Problem> {
    let gate = state.engine.gate();
    gate.refresh(&state.store).await.map_err(|err| Problem::store(err, super::StoreStage::Lookup))?;
    let config = state.config();
    let routes: Vec<Value> = config
        .routes
        .iter()
        .map(|route| {
            let chain: Vec<Value> = route
                .chain
                .iter()
                .enumerate()
                .map(|(index, provider)| {
                    let verdict = gate.verdict(route, provider);
                    let health = state.engine.provider_health(provider);
                    let max_execution = config
                        .providers
                        .iter()
                        .find(|p| p.name == *provider)
                        .and_then(|p| p.max_execution)
                        .map(|limit| crate::engine::millis(limit.into()));
                    json!({
                        "provider": provider,
                        "role": if route.step(index).start == 0 { "primary" } else { "fallback" },
                        "contract_required": gate.check(route, provider, index).is_some(),
                        "eligible": verdict.is_eligible(),
                        "reason": verdict.reason(),
                        "max_execution_ms": max_execution,
                        "health": {
                            "state": health.state,
                            "failures": health.failures,
                            "cooling_until": health.cooling_until_ms.map(crate::jobs::rfc3339),
                        },
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

// Schema-only types for the OpenAPI document, never constructed: the answers
// above are built as `json!` values of these shapes.

/// `GET /v1/routes`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct RouteList {
    routes: Vec<RouteInfo>,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct RouteInfo {
    name: String,
    /// Providers in the order they are tried.
    chain: Vec<ChainEntry>,
    /// e.g. `10s`
    attempt_timeout: String,
    retries: u32,
    /// e.g. `7days`
    contract_max_age: String,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ChainEntry {
    provider: String,
    role: ChainRole,
    /// Whether the contract gate applies to this provider on this route.
    contract_required: bool,
    /// Whether the gate lets it serve the route now.
    eligible: bool,
    /// Why it is (not) eligible.
    reason: String,
    /// Its `max_execution` in ms: an `unknown` attempt on it is abandoned
    /// by itself that long after it started (`null`: only an operator does).
    max_execution_ms: Option<i64>,
    /// Its circuit in this gateway process (`[[providers]] health`).
    health: ProviderHealth,
}

/// A provider's circuit, as `GET /v1/routes` shows it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ProviderHealth {
    /// `healthy`, `cooling_down` (passed over), `awaiting_probe` (the next
    /// attempt probes it) or `probing` (a probe is out).
    state: String,
    /// Signs of trouble in a row.
    failures: u32,
    /// While it cools down, until when (RFC 3339).
    cooling_until: Option<String>,
}

#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ChainRole {
    Primary,
    Fallback,
}
