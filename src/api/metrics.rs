//! `GET /metrics`: Prometheus text format (see `crate::telemetry` for the
//! metrics and what each means).

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::{AppState, Problem};
use crate::telemetry;

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "metrics",
    summary = "Prometheus metrics",
    description = "The gateway's metrics in the Prometheus text exposition format; needs no API key.",
    responses(
        (status = 200, description = "Prometheus text format", body = String,
            content_type = "text/plain; version=0.0.4; charset=utf-8"),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn render(State(state): State<AppState>) -> Result<Response, Problem> {
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
    limits_remaining(&state).await?;
    let body = telemetry::handle().map(|handle| handle.render()).unwrap_or_default();
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    Ok(response)
}

/// What every owner's budgets and rate limits have left in their current
/// windows, as `intentgate_limit_remaining`: read from the store, so every
/// replica reports the same.
async fn limits_remaining(state: &AppState) -> Result<(), Problem> {
    let config = state.config();
    let mut owners: Vec<&str> =
        config.principals.iter().map(|p| p.owner.as_deref().unwrap_or(&p.name)).collect();
    owners.sort_unstable();
    owners.dedup();
    for owner in owners {
        for meter in state.engine.usage(owner).await? {
            let left = (meter.limit - meter.used - meter.held).max(0);
            metrics::gauge!(telemetry::LIMIT_REMAINING, "meter" => meter.meter, "unit" => meter.kind.unit())
                .set(left as f64);
        }
    }
    Ok(())
}

/// The provider time a handler's request spent waiting on, put in the
/// response's extensions so the overhead histogram can subtract it. `None`:
/// the request waited on work it cannot account for, and is left out of
/// the histogram rather than counted as overhead.
#[derive(Debug, Clone, Copy)]
pub struct ProviderTime(pub Option<std::time::Duration>);
