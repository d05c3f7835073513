//! The limit admin API (`/v1/admin/limits…`, admin keys for every route):
//! budgets and rate limits on a stored key, a team, a tag or an owner, set,
//! changed and removed at runtime, each change audited. A change applies
//! at once on this replica and within a second on every other (the
//! engine's limit book reads the audit's head).

mod body;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::auth::Admin;
use super::extract::{JsonBody, PathParams, QueryParams};
use super::{AppState, Problem, ProblemType, StoreStage};
use crate::budgets::{LimitScope, SpendLimit};
use crate::jobs::now_ms;

pub use body::{CreateLimit, LimitAuditList, LimitList, LimitView, UpdateLimit};

/// Limits bind every route's spend: only an admin key for every route
/// manages them.
fn unrestricted(admin: &Admin) -> Result<String, Problem> {
    let principal = &admin.0.0;
    if principal.routes.is_some() {
        return Err(Problem::new(
            ProblemType::KeyRightsExceeded,
            "managing limits needs an admin key for every route",
        ));
    }
    Ok(principal.actor())
}

fn stored(err: crate::store::StoreError) -> Problem {
    Problem::store(err, StoreStage::Lookup)
}

async fn view(state: &AppState, limit: &SpendLimit) -> Result<LimitView, Problem> {
    let now = now_ms();
    let reading = state.store.meter(&limit.meter(), limit.window.bounds(now).0).await.map_err(stored)?;
    Ok(LimitView::new(limit, reading, now))
}

/// The limit `id` in force, or 404.
async fn in_force(state: &AppState, id: Uuid) -> Result<SpendLimit, Problem> {
    let limit = state.store.spend_limit(id).await.map_err(stored)?;
    limit.ok_or_else(|| Problem::new(ProblemType::NotFound, format!("no limit {id} in force")))
}

/// What the subject and route name exists: a limit on a key or route
/// nobody has would bind nothing, silently.
async fn check_names(state: &AppState, limit: &SpendLimit) -> Result<(), Problem> {
    if let Some(route) = &limit.route
        && state.config().routes.iter().all(|configured| &configured.name != route)
    {
        return Err(Problem::unknown_route(route).with("path", "/route"));
    }
    if limit.scope == LimitScope::Key && limit.subject != "*" {
        let id = Uuid::parse_str(&limit.subject).unwrap_or_default();
        if state.store.key(id).await.map_err(stored)?.is_none() {
            let problem = Problem::new(ProblemType::InvalidBody, format!("no stored key {id}"));
            return Err(problem.titled("Invalid limit").with("path", "/subject"));
        }
    }
    Ok(())
}

#[utoipa::path(
    post,
    path = "/v1/admin/limits",
    tag = "limits",
    operation_id = "create_limit",
    summary = "Set a budget or rate limit on a key, team, tag or owner (admin)",
    description = "Counted from the current window on (what was spent before it existed is not). \
        A limit on the same subject, route and window as another shares its meter; the smaller applies.",
    security(("bearer" = [])),
    request_body(content = CreateLimit),
    responses(
        (status = 201, description = "The limit", body = LimitView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden` or `key-rights-exceeded`",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body` (`path` names the field) or `unknown-route`",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    admin: Admin,
    JsonBody(body): JsonBody<CreateLimit>,
) -> Result<Response, Problem> {
    let actor = unrestricted(&admin)?;
    let limit = body.limit(actor, now_ms())?;
    check_names(&state, &limit).await?;
    state
        .store
        .insert_spend_limit(&limit)
        .await
        .map_err(|err| Problem::store(err, StoreStage::BeforeCommit))?;
    state.engine.refresh_spend_limits().await.map_err(stored)?;
    let mut response = (StatusCode::CREATED, Json(view(&state, &limit).await?)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/admin/limits/{}", limit.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

#[utoipa::path(
    get,
    path = "/v1/admin/limits",
    tag = "limits",
    operation_id = "list_limits",
    summary = "The stored limits in force, with their meters (admin)",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The limits", body = LimitList),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn list(State(state): State<AppState>, _admin: Admin) -> Result<Json<LimitList>, Problem> {
    let mut limits = Vec::new();
    for limit in state.store.spend_limits().await.map_err(stored)? {
        limits.push(view(&state, &limit).await?);
    }
    Ok(Json(LimitList { limits }))
}

#[utoipa::path(
    patch,
    path = "/v1/admin/limits/{id}",
    tag = "limits",
    operation_id = "update_limit",
    summary = "Change a limit's amount (admin)",
    description = "Give the field of the limit's kind alone. What it applies to never changes: remove \
        it and set a new one.",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The limit's id")),
    request_body(content = UpdateLimit),
    responses(
        (status = 200, description = "The limit as changed", body = LimitView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden` or `key-rights-exceeded`",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`limit-conflict`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn update(
    State(state): State<AppState>,
    admin: Admin,
    PathParams(id): PathParams<Uuid>,
    JsonBody(body): JsonBody<UpdateLimit>,
) -> Result<Json<LimitView>, Problem> {
    let actor = unrestricted(&admin)?;
    let limit = in_force(&state, id).await?;
    let amount = body.amount(&limit)?;
    let changed = state.store.update_spend_limit(&limit, amount, &actor, now_ms()).await;
    settled(&state, changed, id).await?;
    let limit = SpendLimit { amount, version: limit.version + 1, ..limit };
    Ok(Json(view(&state, &limit).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/admin/limits/{id}",
    tag = "limits",
    operation_id = "remove_limit",
    summary = "Remove a limit (admin)",
    description = "Its row and audit stay; its meter's counts stay with the meter.",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The limit's id")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`limit-conflict`", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn remove(
    State(state): State<AppState>,
    admin: Admin,
    PathParams(id): PathParams<Uuid>,
) -> Result<StatusCode, Problem> {
    let actor = unrestricted(&admin)?;
    let limit = in_force(&state, id).await?;
    let removed = state.store.remove_spend_limit(&limit, &actor, now_ms()).await;
    settled(&state, removed, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A conditional change's result: applied here at once, or a conflict.
async fn settled(
    state: &AppState,
    changed: Result<bool, crate::store::StoreError>,
    id: Uuid,
) -> Result<(), Problem> {
    match changed.map_err(|err| Problem::store(err, StoreStage::BeforeCommit))? {
        true => state.engine.refresh_spend_limits().await.map_err(stored),
        false => Err(Problem::new(
            ProblemType::LimitConflict,
            format!("limit {id} changed meanwhile or was removed"),
        )),
    }
}

#[utoipa::path(
    get,
    path = "/v1/admin/limits/audit",
    tag = "limits",
    operation_id = "limit_audit",
    summary = "The audit of limit changes (admin)",
    description = "Every change to a stored limit, in the order made. Nobody can edit it (the database refuses).",
    security(("bearer" = [])),
    params(body::AuditQuery),
    responses(
        (status = 200, description = "A page of entries", body = LimitAuditList),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn audit(
    State(state): State<AppState>,
    _admin: Admin,
    QueryParams(query): QueryParams<body::AuditQuery>,
) -> Result<Json<LimitAuditList>, Problem> {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let entries = state.store.limit_audit(query.after, limit).await.map_err(stored)?;
    let next_after = (entries.len() as i64 == limit).then(|| entries.last().map(|e| e.seq)).flatten();
    Ok(Json(LimitAuditList { entries, next_after }))
}
