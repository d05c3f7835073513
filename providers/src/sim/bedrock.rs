//! The simulator's Amazon Bedrock runtime: `POST /model/{modelId}/invoke`
//! and `…/invoke-with-response-stream`, as strict as AWS is about what it
//! is sent. Every request is authenticated first, by its SigV4 signature
//! over the simulator's own credentials ([`ACCESS_KEY_ID`],
//! [`SECRET_ACCESS_KEY`], recomputed with the gateway's signer) or by the
//! simulator's Bedrock API key ([`API_KEY`]); a wrong signature gets
//! Bedrock's 403 `InvalidSignatureException`. The body must be Anthropic's
//! Messages request as Bedrock takes it: no `model`, no `stream`,
//! `anthropic_version: "bedrock-2023-05-31"`.
//!
//! Answers are the Anthropic dialect's, read through a view of the request
//! with the path's model and stream ([`view`]); a stream is framed in the
//! binary event stream, each Anthropic event base64-encoded in a `chunk`
//! frame's `bytes`. Errors are Bedrock's: `{"message": …}` and the
//! exception's name in `x-amzn-errortype`.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use super::prompt::Event;
use super::script::Fault;
use crate::bedrock::{ANTHROPIC_VERSION, SERVICE, eventstream, sigv4};
use crate::secret::Secret;

/// The access key id the simulator accepts signatures from.
pub const ACCESS_KEY_ID: &str = "AKIDSIMULATOR";
/// The secret it recomputes signatures with.
pub const SECRET_ACCESS_KEY: &str = "intentgate/simulator/SECRETKEY";
/// The Bedrock API key (`Authorization: Bearer …`) it accepts.
pub const API_KEY: &str = "sim-bedrock-api-key";

/// Whether the operation (the path's last segment) streams, and whether
/// it is Converse's; `None` for one Bedrock does not have.
pub(crate) fn target(operation: &str) -> Option<(bool, bool)> {
    match operation {
        "invoke" => Some((false, false)),
        "invoke-with-response-stream" => Some((true, false)),
        "converse" => Some((false, true)),
        "converse-stream" => Some((true, true)),
        _ => None,
    }
}

/// Why AWS would refuse the request's credentials: the exception and its
/// message; `Ok` when they hold.
pub(crate) fn authenticate(headers: &HeaderMap, uri: &Uri, body: &[u8]) -> Result<(), (String, String)> {
    let invalid_token = || {
        (
            "UnrecognizedClientException".to_owned(),
            "The security token included in the request is invalid.".to_owned(),
        )
    };
    let authorization = header(headers, "authorization")
        .ok_or_else(|| ("AccessDeniedException".to_owned(), "Missing Authentication Token".to_owned()))?;
    if let Some(key) = authorization.strip_prefix("Bearer ") {
        return if key == API_KEY { Ok(()) } else { Err(invalid_token()) };
    }
    let parsed = Authorization::parse(authorization).ok_or_else(|| {
        (
            "IncompleteSignatureException".to_owned(),
            format!("Authorization header is malformed: {authorization}"),
        )
    })?;
    if parsed.access_key_id != ACCESS_KEY_ID {
        return Err(invalid_token());
    }
    let date = header(headers, "x-amz-date").unwrap_or_default();
    let names: Vec<&str> = parsed.signed_headers.split(';').collect();
    let required = ["host", "x-amz-date"]
        .into_iter()
        .chain(header(headers, "x-amz-security-token").map(|_| "x-amz-security-token"));
    let scoped = parsed.scope
        == format!("{}/{}/{SERVICE}/aws4_request", date.get(..8).unwrap_or_default(), parsed.region);
    if !scoped || required.into_iter().any(|name| !names.contains(&name)) {
        return Err(mismatch());
    }
    let values: Vec<(&str, &str)> =
        names.iter().map(|name| (*name, header(headers, name).unwrap_or_default())).collect();
    let credentials = sigv4::Credentials {
        access_key_id: ACCESS_KEY_ID.to_owned(),
        secret_access_key: Secret::new(SECRET_ACCESS_KEY),
        session_token: None,
    };
    let scope = sigv4::Scope { date_time: date, region: &parsed.region, service: SERVICE };
    let request =
        sigv4::Request { method: "POST", path: uri.path(), query: uri.query(), headers: &values, body };
    if sigv4::sign(&credentials, &scope, &request).signature == parsed.signature {
        Ok(())
    } else {
        Err(mismatch())
    }
}

fn mismatch() -> (String, String) {
    (
        "InvalidSignatureException".to_owned(),
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret \
         Access Key and signing method. Consult the service documentation for details."
            .to_owned(),
    )
}

/// `AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request, SignedHeaders=…, Signature=…`.
struct Authorization {
    access_key_id: String,
    region: String,
    /// `DATE/REGION/SERVICE/aws4_request`.
    scope: String,
    signed_headers: String,
    signature: String,
}

impl Authorization {
    fn parse(value: &str) -> Option<Self> {
        let rest = value.strip_prefix(sigv4::ALGORITHM)?.trim_start();
        let field = |name: &str| {
            rest.split(',').map(str::trim).find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
        };
        let (access_key_id, scope) = field("Credential")?.split_once('/')?;
        Some(Authorization {
            access_key_id: access_key_id.to_owned(),
            region: scope.split('/').nth(1)?.to_owned(),
            scope: scope.to_owned(),
            signed_headers: field("SignedHeaders")?.to_owned(),
            signature: field("Signature")?.to_owned(),
        })
    }
}

/// What Bedrock refuses in an `InvokeModel` body for Claude.
pub(crate) fn validate(json: &Value) -> Result<(), (u16, String)> {
    for field in ["model", "stream"] {
        if json.get(field).is_some() {
            return Err((
                400,
                format!("Malformed input request: #: extraneous key [{field}] is not permitted"),
            ));
        }
    }
    if json.get("anthropic_version").and_then(Value::as_str) != Some(ANTHROPIC_VERSION) {
        return Err((400, format!("Malformed input request: anthropic_version must be {ANTHROPIC_VERSION}")));
    }
    if !json.get("messages").is_some_and(Value::is_array) {
        return Err((400, "Malformed input request: #: required key [messages] not found".into()));
    }
    if json.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Err((400, "Malformed input request: #: required key [max_tokens] not found".into()));
    }
    Ok(())
}

/// The request as the Anthropic dialect's answers read it: the path's
/// model, and whether the operation streams.
pub(crate) fn view(json: &Value, model: &str, stream: bool) -> Value {
    let mut view = json.clone();
    if let Some(fields) = view.as_object_mut() {
        fields.insert("model".into(), model.into());
        fields.insert("stream".into(), stream.into());
    }
    view
}

/// The exception Bedrock names for an error status.
fn exception(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        _ => "InternalServerException",
    }
}

/// Bedrock's error answer for `status`, the exception named by its status.
pub(crate) fn error(status: u16, message: &str) -> Response {
    refuse(status, exception(status), message)
}

/// Bedrock's error answer: `{"message": …}`, the exception in `x-amzn-errortype`.
pub(crate) fn refuse(status: u16, kind: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let kind = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
    (code, [("x-amzn-errortype", kind)], axum::Json(json!({"message": message}))).into_response()
}

/// A stream's Anthropic events as `InvokeModel` frames (each in a
/// `chunk`), and its terminator's.
pub(crate) fn chunks(events: &[Event], terminator: &Event) -> (Vec<Bytes>, Vec<Bytes>) {
    (events.iter().map(chunk).collect(), vec![chunk(terminator)])
}

/// A stream's event frames with the scripted fault: half the events then
/// an exception frame (`stream-exception`) or a frame whose CRC is wrong
/// (`bad-crc`), or as the SSE dialects do.
pub(crate) fn frames(events: Vec<Bytes>, terminator: Vec<Bytes>, fault: Fault) -> Vec<Bytes> {
    let half = events.len() / 2;
    let mut frames: Vec<Bytes> = match fault {
        Fault::None => events.iter().chain(&terminator).cloned().collect(),
        Fault::NoDone => events.clone(),
        Fault::Stall | Fault::Cut | Fault::Truncated | Fault::Exception | Fault::BadCrc => {
            events[..half].to_vec()
        }
    };
    match fault {
        Fault::Exception => frames.push(eventstream::encode(
            &[
                (":message-type", "exception"),
                (":exception-type", "modelStreamErrorException"),
                (":content-type", "application/json"),
            ],
            json!({"message": "scripted stream exception", "originalStatusCode": 500}).to_string().as_bytes(),
        )),
        Fault::BadCrc => {
            let mut broken = events.get(half).map(|frame| frame.to_vec()).unwrap_or_default();
            if let Some(last) = broken.last_mut() {
                *last ^= 0xff;
            }
            frames.push(Bytes::from(broken));
            frames.extend(events.iter().skip(half + 1).chain(&terminator).cloned());
        }
        _ => {}
    }
    frames
}

/// One Anthropic event in a `chunk` frame.
fn chunk(event: &Event) -> Bytes {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event.data.as_bytes());
    let payload = json!({"bytes": bytes, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0"});
    eventstream::encode(
        &[(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")],
        payload.to_string().as_bytes(),
    )
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_by_the_simulators_credentials_is_accepted_and_any_other_refused() {
        let uri: Uri = "/model/anthropic.claude-v2%3A1/invoke".parse().unwrap_or_default();
        let body = br#"{"anthropic_version":"bedrock-2023-05-31"}"#;
        let sign = |secret: &str| {
            let credentials = sigv4::Credentials {
                access_key_id: ACCESS_KEY_ID.into(),
                secret_access_key: Secret::new(secret),
                session_token: None,
            };
            let date = "20250101T000000Z";
            let signed =
                [("host", "127.0.0.1:9"), ("x-amz-date", date), ("content-type", "application/json")];
            let scope = sigv4::Scope { date_time: date, region: "us-east-1", service: SERVICE };
            let request =
                sigv4::Request { method: "POST", path: uri.path(), query: None, headers: &signed, body };
            let mut headers = HeaderMap::new();
            for (name, value) in signed {
                headers
                    .insert(name, value.parse().unwrap_or_else(|_| axum::http::HeaderValue::from_static("")));
            }
            let authorization = sigv4::sign(&credentials, &scope, &request).authorization;
            headers.insert(
                "authorization",
                authorization.parse().unwrap_or_else(|_| axum::http::HeaderValue::from_static("")),
            );
            headers
        };
        assert_eq!(authenticate(&sign(SECRET_ACCESS_KEY), &uri, body), Ok(()));
        let wrong = authenticate(&sign("not the secret"), &uri, body);
        assert_eq!(wrong.map_err(|(kind, _)| kind), Err("InvalidSignatureException".to_owned()));
        let tampered = authenticate(&sign(SECRET_ACCESS_KEY), &uri, b"{}");
        assert!(tampered.is_err(), "the body is signed");
    }
}
