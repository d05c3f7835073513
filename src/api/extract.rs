//! Extractors whose rejections are problem+json like every other error,
//! instead of axum's plain-text ones.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::{Problem, ProblemType};

/// `axum::Json`, refusing with `malformed-json` (400) or `invalid-body` (422).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(JsonRejection::JsonDataError(err)) => {
                Err(Problem::new(ProblemType::InvalidBody, err.body_text()))
            }
            Err(err) => Err(super::deadline::timed_out(&err)
                .unwrap_or_else(|| Problem::new(ProblemType::MalformedJson, err.body_text()))),
        }
    }
}

/// `axum::extract::Path`; a segment that does not parse is `not-found` (404).
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| PathParams(value))
            .map_err(|err: PathRejection| {
                Problem::new(ProblemType::NotFound, format!("no such resource: {}", err.body_text()))
            })
    }
}
