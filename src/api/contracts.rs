//! `GET /v1/contracts`: per route and provider of its chain, the contract
//! gate's verdict (R9) beside the record it judged: the last run's cases,
//! its first failure, and its age against the route's `contract_max_age`.
//! `GET /v1/routes` says whether; this says why, in detail.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;

use super::{AppState, Caller, Problem, StoreStage};
use crate::jobs::{now_ms, rfc3339};
use crate::store::ContractRecord;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ContractList {
    pub contracts: Vec<ContractStatus>,
}

/// One (route, provider) pair.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ContractStatus {
    pub route: String,
    pub provider: String,
    /// `primary` or `fallback`.
    pub role: &'static str,
    /// Whether the gate applies to this position of the chain.
    pub contract_required: bool,
    /// Whether a passing, current record lets the provider serve the route.
    pub eligible: bool,
    pub reason: String,
    /// e.g. `7days`
    pub contract_max_age: String,
    pub contract_max_age_ms: u64,
    /// The latest recorded run, if any.
    pub last_run: Option<LastRun>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LastRun {
    pub passed: bool,
    pub started_at: String,
    pub finished_at: String,
    /// Milliseconds since the run finished.
    pub age_ms: i64,
    /// Whether the record is older than `contract_max_age`.
    pub expired: bool,
    pub cases: Vec<CaseView>,
    /// The first failed case and its first reason.
    pub first_failure: Option<CaseFailure>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CaseView {
    pub case: String,
    pub passed: bool,
    pub reasons: Vec<String>,
    pub duration_ms: u64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CaseFailure {
    pub case: String,
    pub reason: String,
}

#[utoipa::path(
    get,
    path = "/v1/contracts",
    tag = "operations",
    operation_id = "list_contracts",
    summary = "Contract status per route and provider",
    description = "For each route and each provider of its chain: whether the contract gate lets the \
        provider serve the route and why, the last recorded run's cases with the first failure, and \
        the record's age against the route's `contract_max_age`.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every (route, provider) pair", body = ContractList),
        (status = 401, response = super::problem::Unauthorized),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn list(State(state): State<AppState>, _caller: Caller) -> Result<Json<ContractList>, Problem> {
    let lookup = |err| Problem::store(err, StoreStage::Lookup);
    let gate = state.engine.gate();
    gate.refresh(&state.store).await.map_err(lookup)?;
    let now = now_ms();
    let mut contracts = Vec::new();
    for route in &state.config().routes {
        let max_age: Duration = route.contract_max_age.into();
        let max_age_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
        for (index, provider) in route.chain.iter().enumerate() {
            let verdict = gate.verdict(route, provider);
            let record = gate.record(&route.name, provider);
            contracts.push(ContractStatus {
                route: route.name.clone(),
                provider: provider.clone(),
                role: if index == 0 { "primary" } else { "fallback" },
                contract_required: gate.check(route, provider, index).is_some(),
                eligible: verdict.is_eligible(),
                reason: verdict.reason().to_owned(),
                contract_max_age: route.contract_max_age.to_string(),
                contract_max_age_ms: max_age_ms,
                last_run: record.map(|record| last_run(&record, now, max_age_ms)),
            });
        }
    }
    Ok(Json(ContractList { contracts }))
}

/// The record as people read it. Its report is the runner's JSON; a case
/// it cannot read is left out rather than failing the page.
fn last_run(record: &ContractRecord, now: i64, max_age_ms: u64) -> LastRun {
    let report: Value = serde_json::from_str(&record.report).unwrap_or_default();
    let cases: Vec<CaseView> = report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|case| {
            Some(CaseView {
                case: case["case"].as_str()?.to_owned(),
                passed: case["passed"].as_bool()?,
                reasons: case["reasons"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|reason| reason.as_str().map(str::to_owned))
                    .collect(),
                duration_ms: case["duration_ms"].as_u64().unwrap_or(0),
            })
        })
        .collect();
    let first_failure = cases.iter().find(|case| !case.passed).map(|case| CaseFailure {
        case: case.case.clone(),
        reason: case.reasons.first().cloned().unwrap_or_else(|| "failed".to_owned()),
    });
    let age_ms = now.saturating_sub(record.finished_at).max(0);
    LastRun {
        passed: record.passed,
        started_at: rfc3339(record.started_at),
        finished_at: rfc3339(record.finished_at),
        age_ms,
        expired: u64::try_from(age_ms).unwrap_or(0) > max_age_ms,
        cases,
        first_failure,
    }
}
