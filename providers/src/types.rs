//! Wire and normalised types, independent of any client crate.
//!
//! Requests keep every field they do not understand in `extra`, so a route's
//! `top_k`, `response_format` or `chat_template_kwargs` reaches the provider
//! unchanged; responses keep the exact body in `raw`, so unknown response
//! fields survive for audit and byte-identical replay.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

/// A chat request in the OpenAI shape, which both dialects are built from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Ignored on the way out: the provider's configured model wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Ignored on the way out: `chat` and `chat_stream` set it themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The client's own request, when it came in a protocol a dialect may
    /// speak natively (see [`crate::Native`]); shared, as every attempt
    /// renders from it.
    #[serde(skip)]
    pub native: Option<std::sync::Arc<crate::Native>>,
}

impl ChatRequest {
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest { messages, ..ChatRequest::default() }
    }

    /// The same request with the assistant's answer begun with `text` (a
    /// prefill, see [`crate::Dialect::prefills`]), in its chat view and in
    /// the client's own Messages request if it came as one.
    pub fn prefilled(&self, text: &str) -> ChatRequest {
        let mut prefilled = self.clone();
        prefilled.messages.push(Message::new("assistant", text));
        if let Some(native) = &self.native
            && native.protocol == crate::Protocol::AnthropicMessages
        {
            let mut native = (**native).clone();
            let turn = serde_json::json!({"role": "assistant", "content": text});
            if let Some(Value::Array(messages)) = native.body.get_mut("messages") {
                messages.push(turn);
            }
            prefilled.native = Some(std::sync::Arc::new(native));
        }
        prefilled
    }
}

/// OpenAI chat fields a translated dialect (Gemini, Converse) says in its
/// own terms or leaves out as hints with no meaning to it: never passed
/// through at the top level, which those APIs would refuse.
pub(crate) const TRANSLATED_OR_HINTS: [&str; 17] = [
    "model",
    "stream",
    "stream_options",
    "n",
    "user",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "parallel_tool_calls",
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    /// `null` (or absent) where OpenAI allows it: an assistant message that
    /// only calls tools.
    #[serde(default)]
    pub content: Content,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    pub fn new(role: &str, text: impl Into<String>) -> Self {
        Message { role: role.to_owned(), content: Content::Text(text.into()), extra: Map::new() }
    }

    pub fn system(text: impl Into<String>) -> Self {
        Message::new("system", text)
    }

    pub fn user(text: impl Into<String>) -> Self {
        Message::new("user", text)
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Message::new("assistant", text)
    }
}

/// Message content: a plain string, OpenAI content parts passed through as
/// they are (`{"type":"text","text":...}` is also Anthropic's text block), or
/// none (`null`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Value>),
    #[default]
    None,
}

impl Content {
    /// The text of the content; for parts, the `text` parts concatenated.
    pub fn text(&self) -> String {
        match self {
            Content::None => String::new(),
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect(),
        }
    }
}

/// Token counts as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    /// OpenAI's `usage` member for a dialect with a prompt cache: every
    /// prompt token in `prompt_tokens`, those read from and written to the
    /// cache in its details, so each is priced at its own rate.
    pub(crate) fn openai_with_cache(self, cache_read: u64, cache_write: u64) -> Value {
        serde_json::json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
        })
    }
}

/// A complete, usable answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The whole answer in OpenAI's `chat.completion` shape: the provider's
    /// own body for the OpenAI dialect (every field kept: all `choices`,
    /// `tool_calls`, `refusal`, `logprobs`, `usage` with its details,
    /// `system_fingerprint`, fields we do not know), a translation into that
    /// shape for other dialects. This is what a client gets back.
    pub completion: Value,
    /// The text of choice 0 (empty when it only calls tools): what contract
    /// checks read.
    pub text: String,
    /// `text` parsed as JSON, present when the call asked for `expect_json`.
    pub json: Option<Value>,
    pub usage: Option<Usage>,
    /// Normalised to OpenAI's vocabulary (`stop`, `length`, `tool_calls`).
    pub finish_reason: Option<String>,
    /// The exact response body, for audit and byte-identical replay (a
    /// stream's: the JSON list of its `chunks`).
    pub raw: Bytes,
    /// A streamed answer's chunks as its readers got them, which a replay
    /// sends again; `None` for an answer in one piece.
    pub chunks: Option<Vec<std::sync::Arc<Value>>>,
    /// `raw` is held, parsed, in `completion` (OpenAI's dialect), `native`
    /// (an answer passed through) or `chunks` (a stream): whoever keeps
    /// those need not keep `raw` too. A translated dialect's own body is
    /// held nowhere else.
    pub raw_held: bool,
    /// The model the provider says answered.
    pub model: Option<String>,
    /// The answer as the provider gave it, when the request was its own
    /// protocol passed through (see [`crate::Native`]): what that protocol's
    /// door answers with, thinking blocks and cache usage included.
    pub native: Option<Value>,
    /// The room the answer holds in its gateway's answer budget, given back
    /// when its last copy is gone (see `answer_budget.rs`).
    pub room: crate::Held,
}

/// One event of a streamed answer. The terminator (`[DONE]`,
/// `message_stop`) is not yielded: a stream that simply ends has seen it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChunk {
    /// The event in OpenAI's `chat.completion.chunk` shape (the provider's
    /// own chunk for the OpenAI dialect, every field kept; a translation for
    /// others), or `Value::Null` for events that mean nothing to a client
    /// (Anthropic's `ping`, `content_block_stop`…).
    pub chunk: Value,
    /// New text of choice 0; empty for events that carry none (role, tool
    /// call fragments, usage).
    pub delta: String,
    pub finish_reason: Option<String>,
    /// Totals so far when the event carries them; the last one seen wins.
    pub usage: Option<Usage>,
    /// The exact SSE `data` payload of the event.
    pub raw: Bytes,
    /// The event as the provider sent it, when the request was its own
    /// protocol passed through: every event of it, `chunk` or not, is what
    /// that protocol's door streams.
    pub native: Option<Value>,
    /// Why an event could not be read, when it was skipped in this chunk's
    /// place (`skip_malformed_events`); such a chunk carries nothing else.
    pub skipped: Option<String>,
}

impl StreamChunk {
    /// The chunk OpenAI ends a stream with when `stream_options.include_usage`
    /// asked: no choices, the totals (`openai`, OpenAI's `usage` member).
    pub(crate) fn usage_only(openai: Value, usage: Option<Usage>, raw: Bytes) -> StreamChunk {
        StreamChunk {
            chunk: serde_json::json!({"object": "chat.completion.chunk", "choices": [], "usage": openai}),
            delta: String::new(),
            finish_reason: None,
            usage,
            raw,
            native: None,
            skipped: None,
        }
    }
}

/// Who is calling: the job identity travels downstream (R10 in `docs/design.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallContext {
    /// Sent as `Idempotency-Key`, so a provider that deduplicates can.
    pub job_id: Uuid,
    /// Sent as `X-Intentgate-Attempt`.
    pub attempt: u32,
    /// Parse the answer as JSON; an answer that is not JSON is `bad_output`.
    pub expect_json: bool,
    /// Sent as W3C `traceparent`: the attempt's span, when traces are exported.
    pub traceparent: Option<TraceParent>,
}

/// A W3C trace context: the span a provider request is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    pub span_id: u64,
    pub sampled: bool,
}

impl TraceParent {
    /// The `traceparent` header's value (version `00`).
    pub fn header(&self) -> String {
        format!("00-{:032x}-{:016x}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_w3c() {
        let parent =
            TraceParent { trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736, span_id: 0xb7, sampled: true };
        assert_eq!(parent.header(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00000000000000b7-01");
        let unsampled = TraceParent { sampled: false, ..parent };
        assert!(unsampled.header().ends_with("-00"));
    }

    #[test]
    fn unknown_fields_round_trip() -> Result<(), serde_json::Error> {
        let body = serde_json::json!({
            "model": "m", "max_tokens": 5, "top_k": 3, "temperature": 0.25,
            "chat_template_kwargs": {"enable_thinking": false},
            "messages": [
                {"role": "user", "content": "hi", "name": "ann"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ]
        });
        let req: ChatRequest = serde_json::from_value(body.clone())?;
        assert_eq!(req.messages[1].content.text(), "ab");
        assert_eq!(serde_json::to_value(&req)?, body);
        Ok(())
    }
}
