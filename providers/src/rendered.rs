//! A request body rendered for one provider, once per attempt.
//!
//! The engine reads what a body will cost (its tokens, its completion
//! limit) before the attempt's row is written, and the call sends the very
//! same bytes: what was reserved is what went out, and the body is built
//! and serialised once.

use bytes::Bytes;
use serde_json::Value;

use crate::outcome::Failure;

/// The body a provider is sent, as JSON and as the bytes on the wire.
#[derive(Debug, Clone)]
pub struct Rendered {
    json: Value,
    bytes: Bytes,
    stream: bool,
}

impl Rendered {
    /// Serialises `json`; a body that cannot be serialised is never sent.
    pub(crate) fn new(json: Value, stream: bool) -> Result<Rendered, Failure> {
        let bytes = serde_json::to_vec(&json).map_err(|err| Failure::NotSent {
            reason: format!("cannot encode the request: {err}"),
            local: true,
        })?;
        Ok(Rendered { json, bytes: Bytes::from(bytes), stream })
    }

    /// The body as JSON, to read its fields (a completion limit, `n`).
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The body as sent, to count its tokens.
    pub fn text(&self) -> &str {
        // Serialised JSON is UTF-8; an empty text would only undercount.
        std::str::from_utf8(&self.bytes).unwrap_or_default()
    }

    /// Whether it asks for a stream (and goes to the streaming address).
    pub fn is_stream(&self) -> bool {
        self.stream
    }

    /// The bytes to send: shared, not copied.
    pub(crate) fn bytes(&self) -> Bytes {
        self.bytes.clone()
    }
}
