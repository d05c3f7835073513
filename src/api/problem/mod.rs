//! `application/problem+json` (RFC 9457): every error the API returns.
//!
//! Each problem has a stable `type` (a URI ending in the slug that
//! `docs/design.md` and `docs/http-api.md` use, e.g. `idempotency-key-reused`)
//! that clients can match on, and a human `detail`. Extension members
//! (`job_id`, `attempt_id`, …) carry what a client needs to act. The types,
//! with their statuses and titles, are the one table in [`ProblemType`]; a
//! store error becomes a problem that says how far the request had got
//! ([`StoreStage`]).

mod attempts;
mod causes;
mod keys;
mod kind;
mod request;
mod schema;
mod store;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

pub use kind::ProblemType;
pub use schema::{
    BodyTooLarge, Forbidden, Internal, LimitReached, StoreUnavailable, Unauthorized, UpstreamFailed,
};
pub use store::StoreStage;

pub const PROBLEM_TYPE_BASE: &str = "https://intentgate.dev/problems/";

#[derive(Debug)]
pub struct Problem {
    kind: ProblemType,
    title: &'static str,
    detail: String,
    extensions: Map<String, Value>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Problem {
    /// A problem of type `kind`, with the headers that type always carries.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        let headers = kind
            .headers()
            .iter()
            .map(|(name, value)| (HeaderName::from_static(name), HeaderValue::from_static(value)))
            .collect();
        Problem { kind, title: kind.title(), detail: detail.into(), extensions: Map::new(), headers }
    }

    /// A more specific title than the type's own (e.g. `Invalid resolution`
    /// for an `invalid-body`), for people; clients match on the type.
    pub fn titled(mut self, title: &'static str) -> Self {
        self.title = title;
        self
    }

    /// `Retry-After: seconds` on this problem (for types whose wait varies).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.headers.push((header::RETRY_AFTER, HeaderValue::from(seconds)));
        self
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_owned(), value.into());
        self
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    pub fn slug(&self) -> &'static str {
        self.kind.slug()
    }
}

/// The members in RFC 9457's order, then the extensions.
#[derive(serde::Serialize)]
struct ProblemBody<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(flatten)]
    extensions: &'a Map<String, Value>,
}

/// A problem's members as its response carries them in its extensions,
/// beside the bytes: a door that answers in its own error shape
/// (`crate::api::door::errors`) builds that shape from these, without
/// parsing the body back.
#[derive(Debug, Clone)]
pub struct ProblemMembers(pub Map<String, Value>);

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.kind.status();
        let body = ProblemBody {
            kind: format!("{PROBLEM_TYPE_BASE}{}", self.kind.slug()),
            title: self.title,
            status: status.as_u16(),
            detail: &self.detail,
            extensions: &self.extensions,
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let kind = body.kind;
        let mut members = self.extensions;
        members.insert("type".into(), kind.into());
        members.insert("title".into(), self.title.into());
        members.insert("status".into(), status.as_u16().into());
        members.insert("detail".into(), self.detail.into());
        let mut response = (status, bytes).into_response();
        response.extensions_mut().insert(ProblemMembers(members));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}
