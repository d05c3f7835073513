//! `GET /v1/usage`: every budget and rate limit of the caller, as it
//! stands (the 429s they answer with are `Problem::limit`); and
//! `GET /v1/usage/spend`: what was charged, grouped by key, owner, team,
//! tag, route, provider, model and day (see `crate::budgets::report`).

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::extract::QueryParams;
use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::budgets::report::{self, Dimension};
use crate::budgets::{LimitKind, nanos_to_decimal};
use crate::config::Role;
use crate::engine::MeterUsage;
use crate::jobs::{Attribution, Payer, Tags, rfc3339};

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
    description = "Every budget and rate limit that applies to the caller — its owner's, and the stored \
        limits of its key and team — (an admin: to `owner`'s), \
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
    // The caller's own: its owner's, key's and team's limits; another
    // owner's (admins): that owner's.
    let own = caller.attribution(Tags::default());
    let (owner, attribution) = match query.owner {
        Some(owner) if owner != caller.owner && caller.role != Role::Admin => {
            return Err(Problem::new(ProblemType::Forbidden, "only admins read another owner's usage"));
        }
        Some(owner) if owner != caller.owner => (owner, Attribution::default()),
        _ => (caller.owner.clone(), own),
    };
    let payer = Payer { owner: &owner, attribution: &attribution };
    let meters = state.engine.usage(payer).await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
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

/// `GET /v1/usage/spend`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SpendQuery {
    /// From this instant (RFC 3339) or day (`2026-12-01`, UTC); 30 days ago by default.
    from: Option<String>,
    /// Up to this instant or day (exclusive); now by default.
    to: Option<String>,
    /// Comma-separated: `day`, `owner`, `key`, `team`, `tag`, `route`, `provider`, `model`; `day` by default.
    group_by: Option<String>,
    /// Admins only: one owner's spend (others always see their own).
    owner: Option<String>,
    /// `json` (the default) or `csv`.
    format: Option<String>,
}

/// The report's JSON form.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SpendReport {
    pub currency: String,
    pub from: String,
    pub to: String,
    /// The dimensions, in the order each row's values follow.
    pub group_by: Vec<&'static str>,
    pub rows: Vec<SpendRow>,
    /// Each attempt counted once (rows grouped by tag may add up to more).
    pub total: SpendRow,
}

/// One group's charges.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SpendRow {
    /// The group's value of each dimension (`group_by`'s names); null: none
    /// (a config principal has no key, an untagged job no tag).
    #[schema(value_type = Object)]
    pub group: serde_json::Map<String, Value>,
    /// In the currency.
    pub cost: f64,
    /// Exactly, in nano-units.
    pub cost_nanos: i64,
    pub tokens: i64,
    /// Settled attempts.
    pub attempts: i64,
}

/// A day in milliseconds: a report reaches 30 of them back unless `from` says otherwise.
pub const DAY_MS: i64 = 86_400_000;

#[utoipa::path(
    get,
    path = "/v1/usage/spend",
    tag = "operations",
    operation_id = "spend",
    summary = "What was charged, grouped by key, owner, team, tag, route, provider, model or day",
    description = "Read from the settled attempts' charges: the total is, to the nano-unit, the sum of \
        what was charged. Grouped by `tag`, an attempt of a job with several tags counts under each. \
        `format=csv` (or `Accept: text/csv`) answers CSV with the same columns.",
    security(("bearer" = [])),
    params(SpendQuery),
    responses(
        (status = 200, description = "The report", body = SpendReport),
        (status = 400, description = "`malformed-request`: a time or dimension that cannot be read",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn spend(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: axum::http::HeaderMap,
    QueryParams(query): QueryParams<SpendQuery>,
) -> Result<Response, Problem> {
    // An admin reads everyone's (or `owner`'s), a team admin its team's,
    // anyone else its owner's.
    let team = caller.team_scope().map(str::to_owned);
    let owner = match query.owner.as_deref() {
        Some(owner) if owner != caller.owner && caller.role == Role::User => {
            return Err(Problem::new(ProblemType::Forbidden, "only admins read another owner's spend"));
        }
        Some(owner) => Some(owner.to_owned()),
        None if caller.role == Role::User => Some(caller.owner.clone()),
        None => None,
    };
    let bad = |name: &str, detail: String| {
        Problem::new(ProblemType::MalformedRequest, detail).with("parameter", name)
    };
    let to = query.to.as_deref().map(|to| instant("to", to)).transpose().map_err(|e| bad("to", e))?;
    let from =
        query.from.as_deref().map(|from| instant("from", from)).transpose().map_err(|e| bad("from", e))?;
    let dimensions =
        dimensions(query.group_by.as_deref().unwrap_or("day")).map_err(|e| bad("group_by", e))?;
    let to = to.unwrap_or_else(crate::jobs::now_ms);
    let ask = SpendAsk { from_ms: from.unwrap_or(to - 30 * DAY_MS), to_ms: to, dimensions, owner, team };
    let report = spend_report(&state.store, &state.config(), state.engine.currency(), &ask).await;
    let report = report.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let csv = query.format.as_deref() == Some("csv")
        || headers
            .get(header::ACCEPT)
            .and_then(|accept| accept.to_str().ok())
            .is_some_and(|a| a.contains("text/csv"));
    Ok(match csv {
        true => ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], spend_csv(&report)).into_response(),
        false => Json(report).into_response(),
    })
}

/// What a spend report covers.
#[derive(Debug, Clone)]
pub struct SpendAsk {
    pub from_ms: i64,
    pub to_ms: i64,
    pub dimensions: Vec<Dimension>,
    /// One owner's spend only; `None`: everyone's.
    pub owner: Option<String>,
    /// One team's spend only; `None`: every team's (and none).
    pub team: Option<String>,
}

/// The spend report of `ask` (what `GET /v1/usage/spend` and `intentgate
/// spend` answer), models named by `config`'s providers.
pub async fn spend_report(
    store: &crate::store::Store,
    config: &crate::config::Config,
    currency: String,
    ask: &SpendAsk,
) -> Result<SpendReport, crate::store::StoreError> {
    let records = store.spend(ask.from_ms, ask.to_ms, ask.owner.as_deref(), ask.team.as_deref()).await?;
    let model_of =
        |provider: &str| config.providers.iter().find(|p| p.name == provider).map(|p| p.model.clone());
    let (rows, totals) = report::group(&records, &ask.dimensions, model_of);
    let names: Vec<&'static str> = ask.dimensions.iter().map(|d| d.name()).collect();
    let view = |group: Vec<Option<String>>, nanos: i64, tokens: i64, attempts: i64| SpendRow {
        group: names.iter().zip(group).map(|(name, value)| ((*name).to_owned(), value.into())).collect(),
        cost: nanos_to_decimal(nanos),
        cost_nanos: nanos,
        tokens,
        attempts,
    };
    Ok(SpendReport {
        currency,
        from: rfc3339(ask.from_ms),
        to: rfc3339(ask.to_ms),
        group_by: names.clone(),
        rows: rows.into_iter().map(|row| view(row.group, row.nanos, row.tokens, row.attempts)).collect(),
        total: view(vec![], totals.nanos, totals.tokens, totals.attempts),
    })
}

/// An RFC 3339 instant, or a UTC day's start.
pub fn instant(name: &str, text: &str) -> Result<i64, String> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.timestamp_millis());
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .map(|start| start.and_utc().timestamp_millis())
        .ok_or_else(|| format!("`{name}` is neither RFC 3339 nor a day (2026-12-01)"))
}

/// The dimensions of a comma-separated list, each once, in its order.
pub fn dimensions(list: &str) -> Result<Vec<Dimension>, String> {
    let mut dimensions = Vec::new();
    for name in list.split(',').map(str::trim).filter(|name| !name.is_empty()) {
        let dimension = Dimension::parse(name).ok_or_else(|| {
            format!("cannot group by `{name}`: day, owner, key, team, tag, route, provider or model")
        })?;
        if !dimensions.contains(&dimension) {
            dimensions.push(dimension);
        }
    }
    Ok(dimensions)
}

/// The report as CSV: a header row of the dimensions and the sums, one
/// line per group (the total is the JSON form's; sum the rows for it).
pub fn spend_csv(report: &SpendReport) -> String {
    let mut text = String::new();
    let header: Vec<&str> =
        report.group_by.iter().copied().chain(["cost", "cost_nanos", "tokens", "attempts"]).collect();
    text.push_str(&header.join(","));
    text.push_str("\r\n");
    for row in &report.rows {
        let mut cells: Vec<String> = report
            .group_by
            .iter()
            .map(|name| csv_cell(row.group.get(*name).and_then(Value::as_str).unwrap_or("")))
            .collect();
        cells.extend([
            format!("{:.9}", row.cost),
            row.cost_nanos.to_string(),
            row.tokens.to_string(),
            row.attempts.to_string(),
        ]);
        text.push_str(&cells.join(","));
        text.push_str("\r\n");
    }
    text
}

/// RFC 4180: a cell with a comma, quote or line break is quoted, its
/// quotes doubled; one starting with `=`, `+`, `-` or `@` is prefixed with
/// `'` so a spreadsheet does not run it as a formula.
fn csv_cell(value: &str) -> String {
    let value = if value.starts_with(['=', '+', '-', '@']) { format!("'{value}") } else { value.to_owned() };
    if value.contains([',', '"', '\n', '\r']) { format!("\"{}\"", value.replace('"', "\"\"")) } else { value }
}
