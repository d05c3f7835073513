//! The simulator's Vertex AI: `POST /v1/projects/{p}/locations/{l}/publishers/{publisher}/models/{model}:{method}`
//! — Claude (`anthropic`: `rawPredict`, `streamRawPredict`) and Gemini
//! (`google`: `generateContent`, `streamGenerateContent?alt=sse`) — behind
//! Google's OAuth ([`tokens`]): a request without a live token it granted
//! is refused with 401 `UNAUTHENTICATED` in Google's error shape. Claude's
//! body is held to Vertex's differences from Anthropic's API (no `model`,
//! `anthropic_version: "vertex-2023-10-16"`, `stream` in the body of a
//! stream only); Gemini's to Gemini's API. Answers are the Anthropic and
//! Gemini ones, for the model the path names.

pub(crate) mod tokens;

use axum::Json;
use axum::body::to_bytes;
use axum::extract::State as Extract;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::Simulator;
use crate::dialect::Dialect;
use crate::vertex::ANTHROPIC_VERSION;

/// What a Vertex path names — the publisher's dialect, the model and
/// whether it streams — or Google's refusal of a method or a publisher it
/// does not have.
pub(crate) fn target(
    publisher: &str,
    target: &str,
    query: Option<&str>,
) -> Result<(Dialect, String, bool), (u16, String)> {
    match publisher {
        "anthropic" => {
            let (model, method) = target.rsplit_once(':').unwrap_or((target, ""));
            let stream = match method {
                "rawPredict" => false,
                "streamRawPredict" => true,
                other => return Err((404, format!("method `{other}` is not found for Claude models"))),
            };
            Ok((Dialect::Anthropic, model.to_owned(), stream))
        }
        "google" => {
            let (model, stream) = super::gemini::target(target, query)?;
            Ok((Dialect::Gemini, model, stream))
        }
        other => Err((404, format!("Publisher `{other}` was not found."))),
    }
}

/// Google's 401, unless the bearer token is one the token endpoint granted
/// and still alive.
pub(crate) fn unauthenticated(sim: &Simulator, headers: &HeaderMap) -> Option<Response> {
    let token = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if token.is_some_and(|token| sim.state.tokens.admit(token)) {
        return None;
    }
    Some(super::gemini::refuse(
        401,
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or \
         other valid authentication credential.",
    ))
}

/// What Vertex refuses in a Claude body, before Anthropic's own checks.
pub(crate) fn validate_claude(body: &Value, stream: bool) -> Result<(), (u16, String)> {
    if body.get("model").is_some() {
        return Err((
            400,
            "model: Extra inputs are not permitted (Vertex names the model in the URL)".into(),
        ));
    }
    if body.get("anthropic_version").and_then(Value::as_str) != Some(ANTHROPIC_VERSION) {
        return Err((400, format!("anthropic_version: must be \"{ANTHROPIC_VERSION}\"")));
    }
    if body.get("stream").and_then(Value::as_bool).unwrap_or(false) != stream {
        return Err((
            400,
            "stream: streamRawPredict streams, rawPredict does not; the body must agree".into(),
        ));
    }
    Ok(())
}

/// A Claude body as the Anthropic answers read it: the path's model named.
pub(crate) fn claude_view(mut body: Value, model: &str) -> Value {
    if let Some(object) = body.as_object_mut() {
        object.remove("anthropic_version");
        object.insert("model".into(), model.into());
    }
    body
}

/// `POST /token`: the service-account grant (see [`tokens`]). Counted as a
/// call to its path, like a model's.
pub(crate) async fn token(Extract(sim): Extract<Simulator>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    sim.state.arrive(&parts.uri, None, Default::default());
    let host = parts.headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or_default();
    let audience = format!("http://{host}{}", parts.uri.path());
    let form = match to_bytes(body, 64 * 1024).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    match sim.state.tokens.exchange(&form, &audience) {
        Ok(granted) => Json(granted).into_response(),
        Err((status, body)) => {
            (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), Json(body)).into_response()
        }
    }
}
