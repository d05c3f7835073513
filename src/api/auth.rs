//! `Authorization: Bearer <api key>` (or `x-api-key: <api key>`, what the
//! Anthropic SDKs send) → the calling [`Principal`].

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

/// Where the Anthropic SDKs send the key.
const X_API_KEY: &str = "x-api-key";

use super::{AppState, Problem, ProblemType, StoreStage};
use crate::auth::{Lookup, Principal, identify};

/// The authenticated caller. Extracting it first means a request without a
/// valid key — unknown, revoked, expired, or rotated past its overlap — is
/// refused before its body is read or anything is stored.
///
/// Who the key is, is `auth::identify`'s to say.
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let key = presented_key(parts)?;
        match identify(&state.principals(), &state.keys, key, crate::jobs::now_ms()).await {
            Ok(Lookup::Found(principal)) => Ok(Caller(principal)),
            Ok(Lookup::Refused(refusal)) => Err(Problem::key_refused(refusal)),
            Ok(Lookup::Unknown) => Err(Problem::new(ProblemType::Unauthorized, "the API key is not known")),
            Err(err) => Err(Problem::store(err, StoreStage::BeforeCommit)),
        }
    }
}

/// A caller where a key is optional (`/metrics`): none when the request
/// presents no key header, but a key that is presented must be known (401
/// otherwise), so a misconfigured scraper is told rather than served less.
impl OptionalFromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Option<Self>, Self::Rejection> {
        if !parts.headers.contains_key(AUTHORIZATION) && !parts.headers.contains_key(X_API_KEY) {
            return Ok(None);
        }
        <Caller as FromRequestParts<AppState>>::from_request_parts(parts, state).await.map(Some)
    }
}

/// The one key the request presents: in `Authorization: Bearer`, or in
/// `x-api-key` — exactly one header of the two, sent once.
fn presented_key(parts: &Parts) -> Result<&str, Problem> {
    let bearer = parts.headers.get_all(AUTHORIZATION).iter();
    let api_key = parts.headers.get_all(X_API_KEY).iter();
    let mut values = bearer.map(|value| (true, value)).chain(api_key.map(|value| (false, value)));
    let (Some((is_bearer, value)), None) = (values.next(), values.next()) else {
        return Err(Problem::new(
            ProblemType::Unauthorized,
            "send exactly one `Authorization: Bearer <api key>` or `x-api-key: <api key>` header",
        ));
    };
    let text = value.to_str().ok();
    let key = if is_bearer {
        text.and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
    } else {
        text
    };
    key.map(str::trim).filter(|k| !k.is_empty()).ok_or_else(|| {
        let detail = if is_bearer {
            "the Authorization header must be `Bearer <api key>`"
        } else {
            "the x-api-key header must hold the API key"
        };
        Problem::new(ProblemType::Unauthorized, detail)
    })
}

/// A caller with an admin key. Extracted from the request's head, it runs
/// before the body is read: a non-admin is refused 403 whatever body it
/// sent, and nothing about the endpoint's input is told to one who may not
/// call it.
#[derive(Debug, Clone)]
pub struct Admin(pub Caller);

/// A caller that manages keys: an admin, or a team admin (its own team's
/// user keys only: what it may touch is `Rights::covers`, what it may see
/// `Principal::team_scope`). Refused like [`Admin`] otherwise.
#[derive(Debug, Clone)]
pub struct KeyAdmin(pub Caller);

/// The caller, if `may` lets it in; else 403 with `refusal`.
async fn caller_who(
    parts: &mut Parts,
    state: &AppState,
    may: fn(&Principal) -> bool,
    refusal: &'static str,
) -> Result<Caller, Problem> {
    let caller = <Caller as FromRequestParts<AppState>>::from_request_parts(parts, state).await?;
    match may(&caller.0) {
        true => Ok(caller),
        false => Err(Problem::new(ProblemType::Forbidden, refusal)),
    }
}

impl FromRequestParts<AppState> for KeyAdmin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let refusal = "this call needs an admin or team-admin key";
        caller_who(parts, state, Principal::manages_keys, refusal).await.map(KeyAdmin)
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        caller_who(parts, state, Principal::is_admin, "this call needs an admin key").await.map(Admin)
    }
}
