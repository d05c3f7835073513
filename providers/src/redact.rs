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
//! deltas is not (that would mean holding events back). What is stored and
//! replayed is scrubbed again once the stream ended: the assembled answer
//! whole ([`crate::Provider::redact_assembled`]) and the events' deltas
//! together ([`crate::Provider::redact_split`]), so a split key is not kept.
//!
//! A key can also hide behind JSON escapes (`\u0073k-…`, `\/`): the
//! decoded strings are scrubbed, and raw bytes whose decoded form still
//! holds the key are replaced by the scrubbed document, re-encoded.

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

/// Whether JSON `raw` may spell `secret` with an escape a byte replacement
/// misses: a `\uXXXX` or `\/` anywhere, or a secret with a character JSON
/// must escape. Without one, every occurrence is the secret's own bytes.
fn may_hide_escaped(raw: &[u8], secret: &str) -> bool {
    let escaped_in_secret = secret.chars().any(|c| matches!(c, '"' | '\\' | '/') || c.is_control());
    escaped_in_secret || raw.windows(2).any(|pair| pair == b"\\u" || pair == b"\\/")
}

/// Whether any string in `value` (keys included) holds `secret`.
fn json_holds(value: &Value, secret: &str) -> bool {
    match value {
        Value::String(s) => s.contains(secret),
        Value::Array(items) => items.iter().any(|item| json_holds(item, secret)),
        Value::Object(map) => map.iter().any(|(key, item)| key.contains(secret) || json_holds(item, secret)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

pub(crate) fn response(mut response: ChatResponse, secret: &str) -> ChatResponse {
    if secret.is_empty() {
        return response;
    }
    json(&mut response.completion, secret);
    text(&mut response.text, secret);
    if let Some(parsed) = &mut response.json {
        json(parsed, secret);
    }
    bytes(&mut response.raw, secret);
    // Shared with the stream's readers: copied only where the secret is.
    for chunk in response.chunks.iter_mut().flatten().filter(|chunk| json_holds(chunk, secret)) {
        json(std::sync::Arc::make_mut(chunk), secret);
    }
    // The key escaped in the raw JSON survives a byte replacement: keep the
    // scrubbed document instead of those bytes. Only bytes that hold an
    // escape that could hide it are parsed to find out.
    if may_hide_escaped(&response.raw, secret)
        && let Ok(mut raw) = serde_json::from_slice::<Value>(&response.raw)
        && json_holds(&raw, secret)
    {
        json(&mut raw, secret);
        response.raw = serde_json::to_vec(&raw).unwrap_or_default().into();
    }
    if let Some(model) = &mut response.model {
        text(model, secret);
    }
    if let Some(native) = &mut response.native {
        json(native, secret);
    }
    response
}

/// A stream's deltas with `secret` scrubbed where it spans several of
/// them (each part dropped, `[redacted]` where the first began); `None`
/// when no delta changes. Deltas are text, so every boundary it cuts at is
/// a character boundary.
pub(crate) fn split(deltas: &[String], secret: &str) -> Option<Vec<String>> {
    if secret.is_empty() {
        return None;
    }
    let joined = deltas.concat();
    let mut covered = vec![false; joined.len()];
    for (at, _) in joined.match_indices(secret) {
        covered[at..at + secret.len()].fill(true);
    }
    if !covered.contains(&true) {
        return None;
    }
    let mut start = 0;
    let scrubbed: Vec<String> = deltas
        .iter()
        .map(|delta| {
            let range = start..start + delta.len();
            start = range.end;
            let mut out = String::with_capacity(delta.len());
            let mut at = range.start;
            while at < range.end {
                let end = (at..range.end).find(|&i| covered[i] != covered[at]).unwrap_or(range.end);
                if !covered[at] {
                    out.push_str(&joined[at..end]);
                } else if at == 0 || !covered[at - 1] {
                    out.push_str(REDACTED);
                }
                at = end;
            }
            out
        })
        .collect();
    (scrubbed != deltas).then_some(scrubbed)
}

pub(crate) fn chunk(mut chunk: StreamChunk, secret: &str) -> StreamChunk {
    json(&mut chunk.chunk, secret);
    if let Some(native) = &mut chunk.native {
        json(native, secret);
    }
    text(&mut chunk.delta, secret);
    bytes(&mut chunk.raw, secret);
    chunk
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_secret_split_across_deltas_is_scrubbed_where_it_began() {
        let deltas: Vec<String> =
            ["key: sk-li", "ve-", "0123 and sk-live-0123", " end"].map(String::from).to_vec();
        let scrubbed = super::split(&deltas, "sk-live-0123").unwrap();
        assert_eq!(scrubbed, ["key: [redacted]", "", " and [redacted]", " end"]);
        assert_eq!(super::split(&["plain".to_owned()], "sk-live-0123"), None, "nothing to scrub");
        let accented: Vec<String> = ["é sk-", "x é"].map(String::from).to_vec();
        assert_eq!(super::split(&accented, "sk-x").unwrap(), ["é [redacted]", " é"]);
    }

    #[test]
    fn scrubs_bytes_and_every_json_string() {
        let mut raw = bytes::Bytes::from_static(b"a sk-1 b sk-1");
        super::bytes(&mut raw, "sk-1");
        assert_eq!(&raw[..], b"a [redacted] b [redacted]");
        let mut value = json!({"x": ["key sk-1"], "sk-1": {"y": "sk-1"}, "n": 1});
        super::json(&mut value, "sk-1");
        assert_eq!(value, json!({"x": ["key [redacted]"], "[redacted]": {"y": "[redacted]"}, "n": 1}));
    }

    #[test]
    fn an_escaped_key_and_a_key_assembled_from_deltas_are_scrubbed() {
        let raw = br#"{"choices":[{"message":{"content":"sk-1 and sk\/x"}}]}"#;
        let response = crate::types::ChatResponse {
            completion: serde_json::from_slice(raw).unwrap(),
            // As a stream assembles it: "s" and "k-1" were two deltas.
            text: ["s", "k-1"].concat(),
            json: None,
            usage: None,
            finish_reason: None,
            raw: bytes::Bytes::from_static(raw),
            chunks: None,
            raw_held: false,
            model: None,
            native: None,
            room: crate::Held::default(),
        };
        let scrubbed = super::response(response, "sk-1");
        assert_eq!(scrubbed.text, "[redacted]");
        let stored = String::from_utf8(scrubbed.raw.to_vec()).unwrap();
        let decoded: serde_json::Value = serde_json::from_str(&stored).unwrap();
        assert!(!decoded.to_string().contains("sk-1"), "{stored}");
        assert!(decoded.to_string().contains("[redacted]"), "{stored}");
        assert!(!scrubbed.completion.to_string().contains("sk-1"));
    }

    #[test]
    fn only_an_escape_that_could_hide_the_key_makes_the_answer_parsed() {
        assert!(!super::may_hide_escaped(br#"{"a":"line\nnext \"q\""}"#, "sk-1"));
        assert!(super::may_hide_escaped(br#"{"a":"\u0073k-1"}"#, "sk-1"));
        assert!(super::may_hide_escaped(br#"{"a":"sk\/1"}"#, "sk/1"));
        assert!(super::may_hide_escaped(b"{}", "sk\"\u{7}"));
    }
}
