//! Scrubbing a provider's own API key out of everything that leaves this
//! crate. A provider may echo its key — in an error ("invalid key sk-…") or
//! in a 2xx answer (a debugging proxy, a misbehaving self-hosted server) —
//! and what leaves here is stored (attempts' `response`, the job's
//! `result`), logged and returned to callers. Replacing the key in the raw
//! bytes breaks their byte-for-byte fidelity, only where the key was: a key
//! is worse to keep than an exact copy is to lose.
//!
//! Streams are scrubbed event by event, as they are forwarded live: a key
//! whole inside one event is redacted, a key split across two events'
//! deltas is not (that would mean holding events back).

use bytes::Bytes;
use serde_json::Value;

use crate::types::{ChatResponse, StreamChunk};

/// What the key is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

pub(crate) fn text(text: &mut String, secret: &str) {
    if !secret.is_empty() && text.contains(secret) {
        *text = text.replace(secret, REDACTED);
    }
}

/// `bytes` with every occurrence of `secret` replaced (the same bytes,
/// not copied, when it does not occur).
pub(crate) fn bytes(bytes: &mut Bytes, secret: &str) {
    let needle = secret.as_bytes();
    if needle.is_empty() || !bytes.windows(needle.len()).any(|w| w == needle) {
        return;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest: &[u8] = bytes;
    while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(REDACTED.as_bytes());
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    *bytes = Bytes::from(out);
}

/// Every string in `value`, object keys included.
pub(crate) fn json(value: &mut Value, secret: &str) {
    if secret.is_empty() {
        return;
    }
    match value {
        Value::String(s) => text(s, secret),
        Value::Array(items) => items.iter_mut().for_each(|item| json(item, secret)),
        Value::Object(map) => {
            if map.keys().any(|key| key.contains(secret)) {
                let taken = std::mem::take(map);
                for (key, value) in taken {
                    map.insert(key.replace(secret, REDACTED), value);
                }
            }
            map.values_mut().for_each(|item| json(item, secret));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

pub(crate) fn response(mut response: ChatResponse, secret: &str) -> ChatResponse {
    json(&mut response.completion, secret);
    text(&mut response.text, secret);
    if let Some(parsed) = &mut response.json {
        json(parsed, secret);
    }
    bytes(&mut response.raw, secret);
    if let Some(model) = &mut response.model {
        text(model, secret);
    }
    response
}

pub(crate) fn chunk(mut chunk: StreamChunk, secret: &str) -> StreamChunk {
    json(&mut chunk.chunk, secret);
    text(&mut chunk.delta, secret);
    bytes(&mut chunk.raw, secret);
    chunk
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn scrubs_bytes_and_every_json_string() {
        let mut raw = bytes::Bytes::from_static(b"a sk-1 b sk-1");
        super::bytes(&mut raw, "sk-1");
        assert_eq!(&raw[..], b"a [redacted] b [redacted]");
        let mut value = json!({"x": ["key sk-1"], "sk-1": {"y": "sk-1"}, "n": 1});
        super::json(&mut value, "sk-1");
        assert_eq!(value, json!({"x": ["key [redacted]"], "[redacted]": {"y": "[redacted]"}, "n": 1}));
    }
}
