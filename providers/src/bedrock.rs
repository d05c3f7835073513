//! Amazon Bedrock, Claude through `InvokeModel`
//! (`POST /model/{modelId}/invoke`) and `InvokeModelWithResponseStream`
//! (`…/invoke-with-response-stream`): the body is Anthropic's Messages
//! request without `model` (the path names it) and without `stream` (the
//! operation says it), with `anthropic_version: "bedrock-2023-05-31"` and
//! the client's `anthropic-beta` header as the body's `anthropic_beta`. So
//! the Anthropic dialect renders and decodes it, and a Messages request
//! passes through as the client sent it. Streams arrive in AWS's binary
//! event stream ([`eventstream`]); each `chunk` carries one Anthropic
//! stream event, base64-encoded, which the Anthropic stream state decodes.
//!
//! Credentials are per request ([`Credentials`], behind
//! `crate::authorize`): an AWS key pair (and session token) signs each
//! request with Signature Version 4 ([`sigv4`]); a Bedrock API key is a
//! static `Authorization: Bearer` header instead.

pub(crate) mod eventstream;
pub mod sigv4;

use std::time::SystemTime;

use base64::Engine as _;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::authorize::{Authorize, Outgoing};
use crate::outcome::Failure;
use crate::transport::Paths;
use eventstream::{Frame, FrameError};

/// The body's version field Bedrock requires of Anthropic's models.
pub(crate) const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";
/// The service name SigV4 scopes Bedrock's runtime API to.
pub(crate) const SERVICE: &str = "bedrock";

/// The Bedrock runtime's origin in `region`, when `base_url` is not given.
pub fn default_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// A Bedrock API key, sent as a bearer token.
pub(crate) fn auth(key: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {key}"))]
}

/// Where a model's operations are: the id is one path segment, so every
/// byte but the unreserved ones is percent-encoded (`:` as `%3A`).
pub(crate) fn paths(model: &str) -> Paths {
    let base = format!("/model/{}", sigv4::encode(model.as_bytes()));
    Paths {
        chat: format!("{base}/invoke"),
        chat_stream: Some(format!("{base}/invoke-with-response-stream")),
        embeddings: format!("{base}/invoke"),
    }
}

/// An Anthropic Messages body (rendered or passed through) as
/// `InvokeModel` takes it. `carried`: the client's own headers, when its
/// request passes through; its `anthropic-beta` values become the body's
/// `anthropic_beta` (Bedrock reads no Anthropic header).
pub(crate) fn invoke_body(mut body: Value, carried: &[(String, String)]) -> Value {
    let Some(fields) = body.as_object_mut() else { return body };
    fields.remove("model");
    fields.remove("stream");
    fields.insert("anthropic_version".into(), ANTHROPIC_VERSION.into());
    let betas: Vec<Value> = carried
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("anthropic-beta"))
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .filter(|beta| !beta.is_empty())
        .map(Value::from)
        .collect();
    if !betas.is_empty() {
        fields.insert("anthropic_beta".into(), Value::Array(betas));
    }
    body
}

/// What an event frame's payload is: `InvokeModel`'s `chunk` of one
/// Anthropic stream event (base64 in `bytes`), or one typed Converse event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload {
    Chunk,
    Event,
}

/// One event-stream frame as the data of a dialect's stream event: a
/// `chunk`'s base64 `bytes`, or a Converse event as `{"<event type>":
/// <payload>}` (the shape of Converse's stream union). An exception frame is the provider saying,
/// mid-stream, that it will send nothing more: `rejected` with the status
/// Bedrock gives the same exception outside a stream, as Anthropic's own
/// in-stream `error` event is. A frame that is not one is malformed:
/// `bad_output`.
pub(crate) fn event_data(
    frame: Result<Frame, FrameError>,
    payload: Payload,
) -> Result<Option<Bytes>, Failure> {
    let frame = frame.map_err(|err| Failure::bad_output(err.to_string(), Bytes::new()))?;
    match frame.header(":message-type") {
        Some("event") if payload == Payload::Event => {
            let kind = frame.header(":event-type").unwrap_or_default();
            let event: Value = serde_json::from_slice(&frame.payload).map_err(|err| {
                Failure::bad_output(
                    format!("a Converse `{kind}` event is not JSON: {err}"),
                    frame.payload.clone(),
                )
            })?;
            Ok(Some(Bytes::from(serde_json::json!({ kind: event }).to_string())))
        }
        Some("event") if frame.header(":event-type") == Some("chunk") => {
            #[derive(serde::Deserialize)]
            struct Chunk {
                bytes: String,
            }
            let bad = |reason: String| Failure::bad_output(reason, frame.payload.clone());
            let chunk: Chunk = serde_json::from_slice(&frame.payload)
                .map_err(|err| bad(format!("a Bedrock chunk is not {{\"bytes\": …}}: {err}")))?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(chunk.bytes)
                .map_err(|err| bad(format!("a Bedrock chunk's bytes are not base64: {err}")))?;
            Ok(Some(Bytes::from(data)))
        }
        // Other events (none today) carry nothing of the answer.
        Some("event") => Ok(None),
        Some("exception") => {
            let kind = frame.header(":exception-type").unwrap_or_default();
            Err(rejected(kind, &frame.payload))
        }
        Some("error") => {
            let kind = frame.header(":error-code").unwrap_or_default();
            let message = frame.header(":error-message").unwrap_or_default();
            Err(rejected(kind, message.as_bytes()))
        }
        _ => Err(Failure::bad_output("an event-stream frame without a known :message-type", frame.payload)),
    }
}

fn rejected(kind: &str, payload: &[u8]) -> Failure {
    let body = format!("{kind}: {}", String::from_utf8_lossy(payload));
    Failure::Rejected { status: exception_status(kind), retry_after: None, body }
}

/// The HTTP status Bedrock answers each exception with outside a stream.
fn exception_status(kind: &str) -> u16 {
    match kind.trim_end_matches("Exception").to_ascii_lowercase().as_str() {
        "validation" => 400,
        "accessdenied" => 403,
        "resourcenotfound" => 404,
        "modeltimeout" => 408,
        "modelerror" | "modelstreamerror" => 424,
        "throttling" => 429,
        "serviceunavailable" => 503,
        _ => 500,
    }
}

/// AWS credentials that sign each request (SigV4) for one region.
#[derive(Debug)]
pub(crate) struct Credentials {
    pub(crate) keys: sigv4::Credentials,
    pub(crate) region: String,
}

impl Credentials {
    /// Adds `x-amz-date`, the session token and `Authorization` to
    /// `request`, signing host, content type, date and token.
    fn sign(&self, request: Outgoing<'_>, now: SystemTime) -> Result<(), Failure> {
        let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let date = sigv4::amz_date(since_epoch);
        let host = match (request.url.host_str(), request.url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => return Err(unsigned("the URL has no host")),
        };
        let content_type = request
            .headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let token = self.keys.session_token.as_ref().map(crate::secret::Secret::expose);
        let mut signed =
            vec![("content-type", content_type.as_str()), ("host", &host), ("x-amz-date", &date)];
        if let Some(token) = token {
            signed.push(("x-amz-security-token", token));
        }
        let scope = sigv4::Scope { date_time: &date, region: &self.region, service: SERVICE };
        let signature = sigv4::sign(
            &self.keys,
            &scope,
            &sigv4::Request {
                method: "POST",
                path: request.url.path(),
                query: request.url.query(),
                headers: &signed,
                body: request.body,
            },
        );
        set(request.headers, "x-amz-date", &date, false)?;
        if let Some(token) = token {
            set(request.headers, "x-amz-security-token", token, true)?;
        }
        set(request.headers, "authorization", &signature.authorization, true)
    }
}

impl Authorize for Credentials {
    fn authorize<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move { self.sign(request, SystemTime::now()) })
    }
}

fn set(
    headers: &mut reqwest::header::HeaderMap,
    name: &'static str,
    value: &str,
    sensitive: bool,
) -> Result<(), Failure> {
    let mut value =
        HeaderValue::from_str(value).map_err(|_| unsigned("a credential is not a header value"))?;
    value.set_sensitive(sensitive);
    headers.insert(HeaderName::from_static(name), value);
    Ok(())
}

fn unsigned(reason: &str) -> Failure {
    Failure::NotSent { reason: format!("cannot sign the request: {reason}"), local: true }
}
