//! `GET /v1/routes`: each route's chain and, per provider, whether the
//! contract gate lets it serve the route, and why (R9), and its health.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::{AppState, Caller, Problem};
use crate::config::RouteConfig;

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
pub async fn list(State(state): State<AppState>, _caller: Caller) -> Result<Json<RouteList>, Problem> {
    let gate = state.engine.gate();
    gate.refresh(&state.store).await.map_err(|err| Problem::store(err, super::StoreStage::Lookup))?;
    let config = state.config();
    let routes = config
        .routes
        .iter()
        .map(|route| RouteInfo {
            name: route.name.clone(),
            chain: route
                .chain
                .iter()
                .enumerate()
                .map(|(index, provider)| entry(&state, route, index, provider))
                .collect(),
            attempt_timeout: route.attempt_timeout.to_string(),
            retries: route.retries,
            contract_max_age: route.contract_max_age.to_string(),
        })
        .collect();
    Ok(Json(RouteList { routes }))
}

/// The `index`th provider of `route`'s chain, as the gate and its health
/// see it now.
fn entry(state: &AppState, route: &RouteConfig, index: usize, provider: &str) -> ChainEntry {
    let gate = state.engine.gate();
    let verdict = gate.verdict(route, provider);
    let health = state.engine.provider_health(provider);
    let max_execution = state
        .config()
        .providers
        .iter()
        .find(|p| p.name == *provider)
        .and_then(|p| p.max_execution)
        .map(|limit| crate::engine::millis(limit.into()));
    ChainEntry {
        provider: provider.to_owned(),
        role: if route.step(index).start == 0 { ChainRole::Primary } else { ChainRole::Fallback },
        contract_required: gate.check(route, provider, index).is_some(),
        eligible: verdict.is_eligible(),
        reason: verdict.reason().to_owned(),
        max_execution_ms: max_execution,
        health: ProviderHealth {
            state: health.state,
            failures: health.failures,
            cooling_until: health.cooling_until_ms.map(crate::jobs::rfc3339),
        },
    }
}

/// `GET /v1/routes`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RouteList {
    routes: Vec<RouteInfo>,
}

#[derive(Serialize, utoipa::ToSchema)]
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

#[derive(Serialize, utoipa::ToSchema)]
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
#[derive(Serialize, utoipa::ToSchema)]
pub struct ProviderHealth {
    /// `healthy`, `cooling_down` (passed over), `awaiting_probe` (the next
    /// attempt probes it) or `probing` (a probe is out).
    state: &'static str,
    /// Signs of trouble in a row.
    failures: u32,
    /// While it cools down, until when (RFC 3339).
    cooling_until: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChainRole {
    Primary,
    Fallback,
}
