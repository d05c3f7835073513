//! `application/problem+json` (RFC 9457): every error the API returns.
//!
//! Each problem has a stable `type` (a URI ending in the slug the SPEC uses,
//! e.g. `idempotency-key-reused`) that clients can match on, and a human
//! `detail`. Extension members (`job_id`, `attempt_id`, …) carry what a
//! client needs to act.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::store::StoreError;

pub const PROBLEM_TYPE_BASE: &str = "https://intentgate.dev/problems/";

#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    slug: &'static str,
    title: &'static str,
    detail: String,
    extensions: Map<String, Value>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem { status, slug, title, detail: detail.into(), extensions: Map::new(), headers: Vec::new() }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.to_owned(), value.into());
        self
    }

    pub fn header(mut self, name: HeaderName, value: &'static str) -> Self {
        self.headers.push((name, HeaderValue::from_static(value)));
        self
    }

    /// Adds OpenAI's `error` member, so OpenAI SDKs show the detail in the
    /// exception they raise.
    pub fn with_openai_error(self) -> Self {
        let error = serde_json::json!({"message": self.detail, "type": self.slug, "code": self.slug});
        self.with("error", error)
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn slug(&self) -> &'static str {
        self.slug
    }

    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", "Missing or invalid API key", detail)
            .header(header::WWW_AUTHENTICATE, "Bearer")
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn bad_request(slug: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, slug, title, detail)
    }

    pub fn unprocessable(slug: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, slug, title, detail)
    }

    /// A conflict that retrying cannot fix: tells SDKs not to retry.
    pub fn conflict(slug: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::CONFLICT, slug, title, detail)
            .header(HeaderName::from_static("x-should-retry"), "false")
    }
}

impl From<StoreError> for Problem {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %err, "job store unavailable");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store-unavailable",
                    "Job store unavailable",
                    "the job store cannot be reached; nothing was stored and no provider was called. Retry later.",
                )
                .header(header::RETRY_AFTER, "1")
            }
            other => {
                tracing::error!(error = %other, "job store error");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                    "the job store failed unexpectedly; the error is in the gateway's log",
                )
            }
        }
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

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ProblemBody {
            kind: format!("{PROBLEM_TYPE_BASE}{}", self.slug),
            title: self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
            extensions: &self.extensions,
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (self.status, bytes).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}
