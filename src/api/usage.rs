//! `GET /v1/usage`: every budget and rate limit of the caller, as it
//! stands (the 429s they answer with are `Problem::limit`).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::QueryParams;
use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::budgets::{LimitKind, nanos_to_decimal};
use crate::config::Role;
use crate::engine::MeterUsage;
use crate::jobs::rfc3339;

#[derive(Debug, Deserialize)]
pub struct UsageQuery {
    owner: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/usage",
    tag = "operations",
    operation_id = "usage",
    summary = "Spend and rate-limit use in the current windows",
    description = "Every budget and rate limit that applies to the caller (an admin: to `owner`), \
        with what settled attempts used and open attempts reserve in its current window. Money is \
        given in the configured currency and, exactly, in nano-units.",
    security(("bearer" = [])),
    params(("owner" = Option<String>, Query, description = "Admins only: whose usage")),
    responses(
        (status = 200, description = "The caller's meters", body = Object),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn usage(
    State(state): State<AppState>,
    Caller(caller): Caller,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Result<Json<Value>, Problem> {
    let owner = match query.owner {
        Some(owner) if owner != caller.owner && caller.role != Role::Admin => {
            return Err(Problem::new(ProblemType::Forbidden, "only admins read another owner's usage"));
        }
        Some(owner) => owner,
        None => caller.owner.clone(),
    };
    let meters = state.engine.usage(&owner).await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    Ok(Json(usage_body(&owner, &state.engine.currency(), &meters)))
}

/// The body of `GET /v1/usage` (also what `intentgate usage --json` prints).
pub fn usage_body(owner: &str, currency: &str, meters: &[MeterUsage]) -> Value {
    let budgets: Vec<Value> = meters
        .iter()
        .filter(|m| m.kind == LimitKind::Budget)
        .map(|m| {
            json!({
                "meter": m.meter,
                "window": m.window,
                "window_start": rfc3339(m.window_start_ms),
                "resets_at": rfc3339(m.window_end_ms),
                "limit": nanos_to_decimal(m.limit),
                "spent": nanos_to_decimal(m.used),
                "reserved": nanos_to_decimal(m.held),
                "remaining": nanos_to_decimal((m.limit - m.used - m.held).max(0)),
                "limit_nanos": m.limit,
                "spent_nanos": m.used,
                "reserved_nanos": m.held,
            })
        })
        .collect();
    let rate_limits: Vec<Value> = meters
        .iter()
        .filter(|m| m.kind != LimitKind::Budget)
        .map(|m| {
            json!({
                "meter": m.meter,
                "per_minute": if m.kind == LimitKind::Requests { "requests" } else { "tokens" },
                "limit": m.limit,
                "used": m.used,
                "reserved": m.held,
                "remaining": (m.limit - m.used - m.held).max(0),
                "resets_at": rfc3339(m.window_end_ms),
            })
        })
        .collect();
    json!({"owner": owner, "currency": currency, "budgets": budgets, "rate_limits": rate_limits})
}
