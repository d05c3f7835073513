//! Extractors whose rejections are problem+json like every other error,
//! instead of axum's plain-text ones, and the one way a body is read:
//! within `server.max_body_bytes`, whatever the endpoint.

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::path::ErrorKind;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::{AppState, Problem, ProblemType};

/// Reads the body up to `limit` bytes, before anything is stored: a body
/// whose `Content-Length` says it is larger is 413 at once, without waiting
/// for it; one that grows larger while read is 413 as soon as it does; one
/// that cannot be read (a malformed chunk, a connection cut mid-body) is 400
/// `malformed-request` — not the client's size, so not 413.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, Problem> {
    let too_large = || {
        Problem::new(ProblemType::BodyTooLarge, format!("the body is larger than the limit of {limit} bytes"))
    };
    if usize::try_from(body.size_hint().lower()).map_or(true, |announced| announced > limit) {
        return Err(too_large());
    }
    let mut read = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| {
            let err = err.into_inner();
            super::deadline::timed_out(err.as_ref()).unwrap_or_else(|| {
                Problem::new(ProblemType::MalformedRequest, format!("the body cannot be read: {err}"))
            })
        })?;
        if read.len() + chunk.len() > limit {
            return Err(too_large());
        }
        read.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(read))
}

/// The raw body, read by [`read_body`] within `server.max_body_bytes`.
pub struct LimitedBody(pub Bytes);

impl FromRequest<AppState> for LimitedBody {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        read_body(request.into_body(), state.max_body_bytes).await.map(LimitedBody)
    }
}

/// `axum::Json`, read within `server.max_body_bytes`, refusing with
/// `malformed-json` (400) or `invalid-body` (422).
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
            });
        if !is_json {
            return Err(Problem::new(
                ProblemType::MalformedJson,
                "expected a request with `Content-Type: application/json`",
            ));
        }
        let LimitedBody(bytes) = LimitedBody::from_request(request, state).await?;
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(JsonRejection::JsonDataError(err)) => {
                Err(Problem::new(ProblemType::InvalidBody, err.body_text()))
            }
            Err(err) => Err(super::deadline::timed_out(&err)
                .unwrap_or_else(|| Problem::new(ProblemType::MalformedJson, err.body_text()))),
        }
    }
}

/// `axum::extract::Path`; a segment that is not UTF-8 (`%FF`) is
/// `malformed-request` (400), one that does not parse is `not-found` (404).
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| PathParams(value))
            .map_err(|err: PathRejection| match &err {
                PathRejection::FailedToDeserializePathParams(inner)
                    if matches!(inner.kind(), ErrorKind::InvalidUtf8InPathParam { .. }) =>
                {
                    Problem::new(ProblemType::MalformedRequest, err.body_text())
                }
                _ => Problem::new(ProblemType::NotFound, format!("no such resource: {}", err.body_text())),
            })
    }
}

/// `axum::extract::Query`; a query that does not read (a parameter sent
/// twice, a value of the wrong type) is `malformed-request` (400), and one
/// holding a NUL (`%00`) is refused like NUL in a body (see
/// [`super::text`]): PostgreSQL cannot compare text with it.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        super::text::refuse_nul_in_query(parts.uri.query().unwrap_or_default())?;
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| QueryParams(value))
            .map_err(|err| Problem::new(ProblemType::MalformedRequest, err.body_text()))
    }
}
