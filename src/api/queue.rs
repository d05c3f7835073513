//! `GET /v1/attempts/unknown`: the attempts waiting for a human (R5), the
//! longest open first, each with what settling it would do next. Settling
//! itself is `POST /v1/jobs/{id}/attempts/{n}/resolve` or
//! `POST /v1/providers/{name}/resolve` (admin), the engine's one path.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use uuid::Uuid;

use super::browse::scope;
use super::view::AttemptView;
use super::{AppState, Caller, Problem, StoreStage};
use crate::config::RouteConfig;
use crate::engine::Gate;
use crate::jobs::{now_ms, rfc3339};
use crate::store::UnknownAttempt;

/// The longest queue answered; a larger backlog is an outage, settled per
/// provider.
const QUEUE_LIMIT: i64 = 500;

/// The queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UnknownQueue<'a> {
    /// Oldest first.
    pub attempts: Vec<QueuedAttempt<'a>>,
    /// Per provider: how many, and since when (for settling an outage).
    pub providers: Vec<ProviderBacklog>,
    /// Whether the caller may settle them (an admin key).
    pub can_resolve: bool,
}

/// One `unknown` attempt and its job.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueuedAttempt<'a> {
    pub job_id: Uuid,
    pub owner: &'a str,
    pub route: &'a str,
    pub idempotency_key: &'a str,
    pub attempt: AttemptView<'a>,
    /// Milliseconds since the attempt started.
    pub open_for_ms: i64,
    /// The provider the chain would continue on once this attempt is
    /// settled, if any is left and the contract gate lets it.
    pub next_provider: Option<String>,
    /// What settling it leads to, in words.
    pub then: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProviderBacklog {
    pub provider: String,
    pub count: i64,
    /// When the oldest of them started.
    pub oldest_started_at: String,
}

#[utoipa::path(
    get,
    path = "/v1/attempts/unknown",
    tag = "attempts",
    operation_id = "unknown_attempts",
    summary = "Attempts waiting to be settled, the longest open first",
    description = "Each `unknown` attempt with its job, how long it has been open, and where its job's \
        chain continues once it is settled. A user sees their own jobs' attempts (settling needs an \
        admin); an admin every owner's. At most 500.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The queue", body = UnknownQueue),
        (status = 401, response = super::problem::Unauthorized),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn unknown(State(state): State<AppState>, caller: Caller) -> Result<Response, Problem> {
    let queued = state
        .store
        .unknown_queue(scope(&caller), QUEUE_LIMIT)
        .await
        .map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let gate = state.engine.gate();
    gate.refresh(&state.store).await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let now = now_ms();
    let mut backlog: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for item in &queued {
        let entry = backlog.entry(item.attempt.provider.as_str()).or_insert((0, i64::MAX));
        entry.0 += 1;
        entry.1 = entry.1.min(item.attempt.started_at_ms);
    }
    let providers = backlog
        .into_iter()
        .map(|(provider, (count, oldest))| ProviderBacklog {
            provider: provider.to_owned(),
            count,
            oldest_started_at: rfc3339(oldest),
        })
        .collect();
    let attempts = queued
        .iter()
        .map(|item| {
            let config = state.config();
            let route = config.routes.iter().find(|route| route.name == item.route);
            let next_provider = route.and_then(|route| next_provider(&gate, route, &item.attempt.provider));
            let then = match (&next_provider, route) {
                (Some(next), _) => format!("the chain continues on {next}"),
                (None, Some(_)) => "no provider of the chain is left to try: the job fails".to_owned(),
                (None, None) => format!("route `{}` is no longer configured: the job fails", item.route),
            };
            queued_attempt(item, now, next_provider, then)
        })
        .collect();
    Ok(Json(UnknownQueue { attempts, providers, can_resolve: caller.0.is_admin() }).into_response())
}

fn queued_attempt(
    item: &UnknownAttempt,
    now: i64,
    next_provider: Option<String>,
    then: String,
) -> QueuedAttempt<'_> {
    QueuedAttempt {
        job_id: item.attempt.job_id,
        owner: &item.owner,
        route: &item.route,
        idempotency_key: &item.idempotency_key,
        attempt: AttemptView::new(&item.attempt),
        open_for_ms: now.saturating_sub(item.attempt.started_at_ms),
        next_provider,
        then,
    }
}

/// The chain's next provider after `after` that the contract gate lets
/// serve the route: the order the driver walks it in once the attempt on
/// `after` is settled (`engine::plan::remaining`, then the gate) — the
/// other members of its pool first, when it is in one (which of them the
/// balancer takes is its choice then).
fn next_provider(gate: &Gate, route: &RouteConfig, after: &str) -> Option<String> {
    let position = route.chain.iter().position(|name| name == after)?;
    let step = route.step(position);
    let pool_rest = step.clone().filter(|&index| index != position);
    pool_rest
        .chain(step.end..route.chain.len())
        .find(|&index| {
            gate.check(route, &route.chain[index], index).is_none_or(|verdict| verdict.is_eligible())
        })
        .map(|index| route.chain[index].clone())
}
