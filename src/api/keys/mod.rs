//! The key admin API (`/v1/admin/keys…`, admin keys only): create, list,
//! read, update, rotate and revoke stored API keys, and read their audit.
//! Every change goes through `auth::KeyManager`, which checks the caller's
//! rights, writes the change with its audit entry and drops the key from
//! the caches; a handler only translates HTTP.

mod body;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::auth::KeyAdmin;
use super::extract::{JsonBody, LimitedBody, PathParams, QueryParams};
use super::{AppState, Problem, ProblemType, StoreStage};
use crate::auth::{Acting, KeyManager};
use crate::jobs::now_ms;

pub use body::{
    AuditList, AuditView, CreateKey, CreatedKey, KeyList, KeyView, RotateKey, RotatedKey, UpdateKey,
};

/// The caller as the key manager sees it.
fn acting(admin: &KeyAdmin) -> Acting<'_> {
    let principal = &admin.0.0;
    Acting { actor: principal.actor(), rights: principal.rights() }
}

/// Whether the caller may see `key`: an admin every key, a team admin its
/// team's (another team's key is as absent as a missing one).
fn visible(admin: &KeyAdmin, key: &crate::keys::ApiKey) -> bool {
    admin.0.0.team_scope().is_none_or(|team| key.team.as_deref() == Some(team))
}

fn manager(state: &AppState) -> KeyManager {
    KeyManager::new(state.store.clone(), Some(state.keys.clone()))
}

fn created(view: impl serde::Serialize, id: Uuid) -> Response {
    let mut response = (StatusCode::CREATED, Json(view)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/admin/keys/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    tag = "keys",
    operation_id = "create_key",
    summary = "Create an API key (admin)",
    description = "Makes a key and answers with it once (`secret`); the gateway keeps its SHA-256 only. \
        The key may not have more rights than the caller's: a caller restricted to routes makes only \
        user keys within them, and an expiring caller only keys that expire no later.",
    security(("bearer" = [])),
    request_body(content = CreateKey),
    responses(
        (status = 201, description = "The key, with its secret", body = CreatedKey),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden` (not an admin) or `key-rights-exceeded`",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body`: a field out of bounds (`path` names it)",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    admin: KeyAdmin,
    JsonBody(body): JsonBody<CreateKey>,
) -> Result<Response, Problem> {
    let now = now_ms();
    let mut spec = body.spec(now)?;
    // A team admin's keys are its team's unless it names one (which must be).
    if spec.team.is_none() {
        spec.team = admin.0.0.team_scope().map(str::to_owned);
    }
    let minted = manager(&state).create(&acting(&admin), spec, now).await;
    let minted = minted.map_err(Problem::key_management)?;
    Ok(created(CreatedKey::new(&minted, now), minted.key.id))
}

#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    tag = "keys",
    operation_id = "list_keys",
    summary = "List the stored API keys (admin)",
    description = "Every stored key, oldest first, with its prefix and status; never a secret or a hash.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The keys", body = KeyList),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn list(State(state): State<AppState>, admin: KeyAdmin) -> Result<Json<KeyList>, Problem> {
    let mut keys = state.store.keys().await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    keys.retain(|key| visible(&admin, key));
    let now = now_ms();
    Ok(Json(KeyList { keys: keys.iter().map(|key| KeyView::new(key, now)).collect() }))
}

#[utoipa::path(
    get,
    path = "/v1/admin/keys/{id}",
    tag = "keys",
    operation_id = "get_key",
    summary = "One stored API key (admin)",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The key's id")),
    responses(
        (status = 200, description = "The key", body = KeyView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    admin: KeyAdmin,
    PathParams(id): PathParams<Uuid>,
) -> Result<Json<KeyView>, Problem> {
    let key = state.store.key(id).await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let key = key.filter(|key| visible(&admin, key));
    let key = key.ok_or_else(|| Problem::new(ProblemType::NotFound, format!("no API key {id}")))?;
    Ok(Json(KeyView::new(&key, now_ms())))
}

#[utoipa::path(
    patch,
    path = "/v1/admin/keys/{id}",
    tag = "keys",
    operation_id = "update_key",
    summary = "Change a key's name, routes, expiry or metadata (admin)",
    description = "Each field given is set; `null` clears `routes` (every route) or `expires_at` (never). \
        Takes effect on every replica within a second.",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The key's id")),
    request_body(content = UpdateKey),
    responses(
        (status = 200, description = "The key as changed", body = KeyView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden` or `key-rights-exceeded`",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`key-conflict`: revoked, or changed meanwhile",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn update(
    State(state): State<AppState>,
    admin: KeyAdmin,
    PathParams(id): PathParams<Uuid>,
    JsonBody(body): JsonBody<UpdateKey>,
) -> Result<Json<KeyView>, Problem> {
    let now = now_ms();
    let key = manager(&state).update(&acting(&admin), id, &body.patch()?, now).await;
    Ok(Json(KeyView::new(&key.map_err(Problem::key_management)?, now)))
}

#[utoipa::path(
    post,
    path = "/v1/admin/keys/{id}/rotate",
    tag = "keys",
    operation_id = "rotate_key",
    summary = "Rotate a key (admin)",
    description = "Makes the key's successor (same owner, role, routes, expiry and metadata; its secret \
        shown once). The old key keeps working for `overlap` (default 24h), then is refused.",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The key's id")),
    request_body(content = RotateKey, description = "May be empty"),
    responses(
        (status = 201, description = "The new key, with its secret, and the old one", body = RotatedKey),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden` or `key-rights-exceeded`",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`key-conflict`: revoked, rotated already, or changed meanwhile",
            body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid-body`", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn rotate(
    State(state): State<AppState>,
    admin: KeyAdmin,
    PathParams(id): PathParams<Uuid>,
    LimitedBody(bytes): LimitedBody,
) -> Result<Response, Problem> {
    let body: RotateKey = if bytes.iter().all(u8::is_ascii_whitespace) {
        RotateKey::default()
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|err| Problem::new(ProblemType::InvalidBody, err.to_string()))?
    };
    let now = now_ms();
    let rotated = manager(&state).rotate(&acting(&admin), id, body.overlap()?, now).await;
    let (minted, previous) = rotated.map_err(Problem::key_management)?;
    let view = RotatedKey { key: CreatedKey::new(&minted, now), previous: KeyView::new(&previous, now) };
    Ok(created(view, minted.key.id))
}

#[utoipa::path(
    post,
    path = "/v1/admin/keys/{id}/revoke",
    tag = "keys",
    operation_id = "revoke_key",
    summary = "Revoke a key (admin)",
    description = "Refused from now on: at once on this replica, within a second on every other. \
        `DELETE /v1/admin/keys/{id}` does the same; the key's row and audit stay.",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The key's id")),
    responses(
        (status = 200, description = "The key, revoked", body = KeyView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden` or `key-rights-exceeded`",
            body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`key-conflict`: revoked already",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn revoke(
    State(state): State<AppState>,
    admin: KeyAdmin,
    PathParams(id): PathParams<Uuid>,
) -> Result<Json<KeyView>, Problem> {
    let now = now_ms();
    let key = manager(&state).revoke(&acting(&admin), id, now).await.map_err(Problem::key_management)?;
    Ok(Json(KeyView::new(&key, now)))
}

#[utoipa::path(
    delete,
    path = "/v1/admin/keys/{id}",
    tag = "keys",
    operation_id = "delete_key",
    summary = "Revoke a key (admin; as POST …/revoke)",
    security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "The key's id")),
    responses(
        (status = 200, description = "The key, revoked", body = KeyView),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 404, description = "`not-found`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`key-conflict`", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn delete(
    state: State<AppState>,
    admin: KeyAdmin,
    id: PathParams<Uuid>,
) -> Result<Json<KeyView>, Problem> {
    revoke(state, admin, id).await
}

#[utoipa::path(
    get,
    path = "/v1/admin/keys/audit",
    tag = "keys",
    operation_id = "key_audit",
    summary = "The audit of key changes (admin)",
    description = "Every change to a stored key, in the order made: who, what, which key, when, and the \
        fields it set. Nobody can edit it (the database refuses).",
    security(("bearer" = [])),
    params(body::AuditQuery),
    responses(
        (status = 200, description = "A page of entries", body = AuditList),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, response = super::problem::Forbidden),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn audit(
    State(state): State<AppState>,
    admin: KeyAdmin,
    QueryParams(query): QueryParams<body::AuditQuery>,
) -> Result<Json<AuditList>, Problem> {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let entries = state.store.key_audit(query.after, limit).await;
    let mut entries = entries.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let next_after = (entries.len() as i64 == limit).then(|| entries.last().map(|e| e.seq)).flatten();
    if admin.0.0.team_scope().is_some() {
        // A team admin reads the changes to its team's keys; the page's
        // `next_after` still steps over the others.
        let keys = state.store.keys().await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
        let ours: Vec<Uuid> = keys.iter().filter(|key| visible(&admin, key)).map(|key| key.id).collect();
        entries.retain(|entry| ours.contains(&entry.key_id));
    }
    Ok(Json(AuditList { entries: entries.iter().map(AuditView::from).collect(), next_after }))
}
