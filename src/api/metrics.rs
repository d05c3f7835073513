//! `GET /metrics`: Prometheus text format (see `crate::telemetry` for the
//! metrics and what each means).
//!
//! Scraping needs no key, but the series that name owners — what each
//! owner's budgets and rate limits have left (`intentgate_limit_remaining`,
//! whose `meter` label names the owner) — are served only to an admin key:
//! who the gateway's clients are and how much each may still spend is not
//! for whoever reaches the port. Every other series names providers,
//! routes and outcomes only.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::auth::Caller;
use super::{AppState, Problem};
use crate::telemetry;

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    summary = "Prometheus metrics",
    description = "The gateway's metrics in the Prometheus text exposition format. Needs no API key; \
        the series that name owners (`intentgate_limit_remaining`) are served only with an admin key.",
    security((), ("bearer" = []), ("x-api-key" = [])),
    responses(
        (status = 200, description = "Prometheus text format", body = String,
            content_type = "text/plain; version=0.0.4; charset=utf-8"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn render(State(state): State<AppState>, viewer: Option<Caller>) -> Result<Response, Problem> {
    let admin = viewer.is_some_and(|Caller(principal)| principal.is_admin());
    // The unknown-attempts gauge is read from the store, so it is right
    // whichever replica settled what.
    let counts = state.store.unknown_attempts_by_provider().await?;
    for provider in &state.config().providers {
        let count = counts.iter().find(|(name, _)| *name == provider.name).map_or(0, |(_, count)| *count);
        metrics::gauge!(telemetry::UNKNOWN_ATTEMPTS, "provider" => provider.name.clone()).set(count as f64);
    }
    // Health is this process's own: each replica reports its circuits.
    let unhealthy = state.engine.unhealthy_providers();
    for provider in &state.config().providers {
        let open = unhealthy.contains(&provider.name);
        metrics::gauge!(telemetry::PROVIDERS_UNHEALTHY, "provider" => provider.name.clone()).set(if open {
            1.0
        } else {
            0.0
        });
    }
    metrics::gauge!(telemetry::CONFIG_INFO, "version" => state.config().version.clone()).set(1.0);
    let answers = state.engine.answer_budget();
    metrics::gauge!(telemetry::ANSWER_BYTES_HELD).set(answers.held_bytes() as f64);
    metrics::counter!(telemetry::ANSWER_BUDGET_WAITS).absolute(answers.waits());
    if admin {
        limits_remaining(&state).await?;
    }
    let mut body = telemetry::handle().map(|handle| handle.render()).unwrap_or_default();
    if !admin {
        body = without_owners(&body);
    }
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    Ok(response)
}

/// What every owner's budgets and rate limits, and every stored limit,
/// have left in their current windows, as `intentgate_limit_remaining`:
/// read from the store, so every replica reports the same.
async fn limits_remaining(state: &AppState) -> Result<(), Problem> {
    let config = state.config();
    let mut owners: Vec<&str> =
        config.principals.iter().map(|p| p.owner.as_deref().unwrap_or(&p.name)).collect();
    owners.sort_unstable();
    owners.dedup();
    let mut meters = state.engine.stored_limit_usage().await?;
    for owner in owners {
        let attribution = crate::jobs::Attribution::default();
        meters.extend(state.engine.usage(crate::jobs::Payer { owner, attribution: &attribution }).await?);
    }
    for meter in meters {
        let left = (meter.limit - meter.used - meter.held).max(0);
        metrics::gauge!(telemetry::LIMIT_REMAINING, "meter" => meter.meter, "unit" => meter.kind.unit())
            .set(left as f64);
    }
    Ok(())
}

/// `text` (the exposition format) without the families that name owners:
/// their samples and their `# HELP` and `# TYPE` lines.
fn without_owners(text: &str) -> String {
    let names_owners = |line: &str| {
        let name = match line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE ")) {
            Some(rest) => rest.split(' ').next(),
            None => line.split(['{', ' ']).next(),
        };
        name == Some(telemetry::LIMIT_REMAINING)
    };
    let mut kept = String::with_capacity(text.len());
    for line in text.lines().filter(|line| !names_owners(line)) {
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The provider time a handler's request spent waiting on, put in the
/// response's extensions so the overhead histogram can subtract it. `None`:
/// the request waited on work it cannot account for, and is left out of
/// the histogram rather than counted as overhead.
#[derive(Debug, Clone, Copy)]
pub struct ProviderTime(pub Option<std::time::Duration>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_families_are_left_out() {
        let text = "# HELP intentgate_limit_remaining left\n# TYPE intentgate_limit_remaining gauge\n\
            intentgate_limit_remaining{meter=\"budget/owner=alice/day\",unit=\"nanos\"} 5\n\
            # TYPE intentgate_limit_remaining_other gauge\nintentgate_limit_remaining_other 1\n\
            # TYPE intentgate_jobs_total counter\nintentgate_jobs_total{result=\"created\"} 3\n";
        assert_eq!(
            without_owners(text),
            "# TYPE intentgate_limit_remaining_other gauge\nintentgate_limit_remaining_other 1\n\
             # TYPE intentgate_jobs_total counter\nintentgate_jobs_total{result=\"created\"} 3\n"
        );
    }
}
