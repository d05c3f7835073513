//! The operator console at `/console`: one HTML page, its script and its
//! style sheet, embedded in the binary (no build step, nothing fetched from
//! the network at run time) and versioned with it.
//!
//! The page holds no data and no secret: it signs in with an API key kept
//! in the tab's `sessionStorage` (never in a URL or a cookie) and calls the
//! same JSON API as any client, with `Authorization: Bearer`, so the
//! console sees exactly what the key may see and is refused exactly as the
//! API refuses (problem+json, shown readably).
//!
//! Every answer carries a Content-Security-Policy that allows only this
//! page's own script and style sheet and requests to this origin: no
//! inline script, no inline style, no framing. Asset URLs carry the build's
//! version and content hash (`?v=`), so they may be cached for good; the
//! page itself is revalidated (`ETag`) so that a new binary is picked up.

use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("assets/console.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// Only this origin's script and style; requests only back to it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// `<crate version>-<first 12 hex of SHA-256 over the assets>`: changes
/// with any byte of them, so a cached asset is never stale.
fn build_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let digest = crate::jobs::sha256_hex(format!("{PAGE}\0{SCRIPT}\0{STYLE}").as_bytes());
        format!("{}-{}", env!("CARGO_PKG_VERSION"), &digest[..12])
    })
}

/// The page with its asset URLs versioned.
fn page() -> &'static str {
    static RENDERED: OnceLock<String> = OnceLock::new();
    RENDERED.get_or_init(|| PAGE.replace("{{BUILD}}", build_tag()))
}

/// How long a response may be reused without asking.
#[derive(Debug, Clone, Copy)]
enum Caching {
    /// Revalidate every time (the page: it names the current assets).
    Revalidate,
    /// Never changes under its URL (an asset, whose URL carries the build).
    Immutable,
}

fn serve(headers: &HeaderMap, body: &'static str, content_type: &'static str, caching: Caching) -> Response {
    let etag = format!("\"{}\"", build_tag());
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|tag| tag.trim() == etag || tag.trim() == "*"));
    let cache_control = match caching {
        Caching::Revalidate => "no-cache",
        Caching::Immutable => "public, max-age=31536000, immutable",
    };
    let mut response = if matches { StatusCode::NOT_MODIFIED.into_response() } else { body.into_response() };
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache_control));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        out.insert(header::ETAG, etag);
    }
    out.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    out.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    out.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    out.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /console`.
#[utoipa::path(
    get,
    path = "/console",
    tag = "console",
    operation_id = "console_page",
    summary = "The operator console (HTML)",
    description = "Jobs, a job's attempt timeline, unknown attempts to settle, contracts and an overview, \
        in the browser. Needs no API key to load; it signs in with one, kept in the tab's \
        sessionStorage, and calls this API with it.",
    responses(
        (status = 200, description = "The page", body = String, content_type = "text/html"),
        (status = 304, description = "Not modified (`If-None-Match`)"),
    )
)]
pub async fn page_handler(headers: HeaderMap) -> Response {
    serve(&headers, page(), "text/html; charset=utf-8", Caching::Revalidate)
}

/// `GET /console/console.js`.
#[utoipa::path(
    get,
    path = "/console/console.js",
    tag = "console",
    operation_id = "console_script",
    summary = "The console's script",
    responses(
        (status = 200, description = "The script", body = String, content_type = "text/javascript"),
        (status = 304, description = "Not modified (`If-None-Match`)"),
    )
)]
pub async fn script_handler(headers: HeaderMap) -> Response {
    serve(&headers, SCRIPT, "text/javascript; charset=utf-8", Caching::Immutable)
}

/// `GET /console/console.css`.
#[utoipa::path(
    get,
    path = "/console/console.css",
    tag = "console",
    operation_id = "console_style",
    summary = "The console's style sheet",
    responses(
        (status = 200, description = "The style sheet", body = String, content_type = "text/css"),
        (status = 304, description = "Not modified (`If-None-Match`)"),
    )
)]
pub async fn style_handler(headers: HeaderMap) -> Response {
    serve(&headers, STYLE, "text/css; charset=utf-8", Caching::Immutable)
}
