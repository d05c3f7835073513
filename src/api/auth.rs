//! `Authorization: Bearer <api key>` → the calling [`Principal`].

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::{AppState, Problem, ProblemType};
use crate::auth::Principal;

/// The authenticated caller. Extracting it first means a request without a
/// valid key is refused before its body is read or anything is stored.
#[derive(Debug, Clone)]
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let mut values = parts.headers.get_all(AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(Problem::new(
                ProblemType::Unauthorized,
                "send exactly one `Authorization: Bearer <api key>` header",
            ));
        };
        let key = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                Problem::new(ProblemType::Unauthorized, "the Authorization header must be `Bearer <api key>`")
            })?;
        state
            .principals
            .authenticate(key)
            .cloned()
            .map(Caller)
            .ok_or_else(|| Problem::new(ProblemType::Unauthorized, "the API key is not known"))
    }
}
