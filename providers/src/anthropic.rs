//! The Anthropic messages dialect.

mod request;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::decoded::{Decoded, StreamEvent};
use crate::outcome::Failure;
use crate::types::{ChatRequest, StreamChunk, Usage};

pub(crate) const PATH: &str = "/v1/messages";
pub(crate) const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");
/// Anthropic requires `max_tokens`; OpenAI-shaped callers often omit it.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 1024;

/// Who serves a provider's Messages API: Anthropic's own, or Vertex AI,
/// whose body names no model and carries the version (see `crate::vertex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Host {
    Anthropic,
    Vertex,
}

pub(crate) fn auth(key: &str) -> Vec<(&'static str, String)> {
    vec![("x-api-key", key.to_owned())]
}

/// What an OpenAI-shaped request asks for that the messages API has no way
/// to say (see `Provider::cannot_express`).
pub(crate) fn cannot_express(req: &ChatRequest) -> Option<String> {
    if req.extra.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Some("`n` > 1: the messages API answers one choice".into());
    }
    for field in ["logprobs", "top_logprobs"] {
        if req.extra.get(field).is_some_and(|v| !v.is_null() && *v != Value::Bool(false)) {
            return Some(format!("`{field}`: the messages API has no log probabilities"));
        }
    }
    if req.extra.get("reasoning_effort").is_some_and(|v| !v.is_null()) {
        return Some(
            "`reasoning_effort`: the messages API's thinking is a token budget, not translated".into(),
        );
    }
    request::untranslatable(req)
}

/// Moves system (and `developer`) messages to the top-level `system` field,
/// translates the conversation, tools and tool choice (see [`request`]),
/// drops what only OpenAI understands, fills in `max_tokens`, and passes
/// every other field through unchanged. A conversation with no translation
/// is an error: it is never sent with the untranslatable part dropped.
pub(crate) fn request_body(req: &ChatRequest, model: &str, stream: bool) -> Result<Value, serde_json::Error> {
    let mut body: Map<String, Value> = req.extra.clone();
    let (system, messages): (Vec<_>, Vec<_>) = req.messages.iter().partition(|m| request::is_system(m));
    if !system.is_empty() {
        let text: Vec<String> = system.iter().map(|m| m.content.text()).collect();
        body.insert("system".into(), text.join("\n\n").into());
    }
    let messages = request::messages(&messages).map_err(<serde_json::Error as serde::de::Error>::custom)?;
    body.insert("messages".into(), Value::Array(messages));
    body.insert("model".into(), model.into());
    body.remove("stream");
    body.insert("max_tokens".into(), req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).into());
    request::fields(req, &mut body);
    if let Some(temperature) = req.temperature {
        body.insert("temperature".into(), temperature.into());
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Ok(Value::Object(body))
}

/// The client's own Messages request (see [`crate::Native`]) as this
/// provider is sent it: what the client sent, with only what the gateway
/// must set — the provider's model, the completion limit the attempt
/// reserves, and whether it streams.
pub(crate) fn passthrough_body(
    native: &crate::Native,
    req: &ChatRequest,
    model: &str,
    stream: bool,
) -> Value {
    let mut body = native.body.clone();
    body.insert("model".into(), model.into());
    if let Some(limit) = req.max_tokens {
        body.insert("max_tokens".into(), limit.into());
    }
    body.remove("stream");
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

#[derive(Deserialize)]
struct MessageBody {
    model: Option<String>,
    content: Vec<Block>,
    usage: Option<AnthropicUsage>,
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

/// Anthropic's `usage`: `input_tokens` are the prompt tokens neither read
/// from nor written to the cache; those are counted apart.
#[derive(Deserialize, Default, Clone, Copy, Debug)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
}

impl AnthropicUsage {
    /// `self` with what a later report (`message_delta`'s) says.
    fn updated(self, later: AnthropicUsage) -> AnthropicUsage {
        let newer = |now: u64, then: u64| if now > 0 { now } else { then };
        AnthropicUsage {
            input_tokens: newer(later.input_tokens, self.input_tokens),
            output_tokens: later.output_tokens,
            cache_creation_input_tokens: newer(
                later.cache_creation_input_tokens,
                self.cache_creation_input_tokens,
            ),
            cache_read_input_tokens: newer(later.cache_read_input_tokens, self.cache_read_input_tokens),
        }
    }
}

impl From<AnthropicUsage> for Usage {
    fn from(u: AnthropicUsage) -> Self {
        let prompt_tokens = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
        Usage { prompt_tokens, completion_tokens: u.output_tokens }
    }
}

/// OpenAI's `usage` member for token counts: every prompt token in
/// `prompt_tokens`, those read from and written to the cache in its
/// details, so each is priced at its own rate.
fn openai_usage(usage: AnthropicUsage) -> Value {
    Usage::from(usage).openai_with_cache(usage.cache_read_input_tokens, usage.cache_creation_input_tokens)
}

/// A `tool_use` block as an OpenAI tool call.
fn tool_call(id: Option<&str>, name: Option<&str>, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// The message translated into OpenAI's `chat.completion` shape: text blocks
/// become `content`, `tool_use` blocks `tool_calls`.
pub(crate) fn decode_response(body: &[u8]) -> Result<Decoded, String> {
    decode_message(serde_json::from_slice(body).map_err(|err| format!("not a message: {err}"))?)
}

/// [`decode_response`] of a message already parsed (one passed through to
/// its client as the provider gave it).
pub(crate) fn decode_parsed(message: &Value) -> Result<Decoded, String> {
    decode_message(MessageBody::deserialize(message).map_err(|err| format!("not a message: {err}"))?)
}

fn decode_message(message: MessageBody) -> Result<Decoded, String> {
    let mut text = String::new();
    let mut any_text = false;
    let mut calls = Vec::new();
    for block in &message.content {
        match block.kind.as_str() {
            "text" => {
                text.push_str(block.text.as_deref().unwrap_or_default());
                any_text = true;
            }
            "tool_use" => {
                let input = block.input.clone().unwrap_or_else(|| json!({}));
                calls.push(tool_call(block.id.as_deref(), block.name.as_deref(), input.to_string()));
            }
            _ => {}
        }
    }
    if !any_text && calls.is_empty() {
        return Err("the message has neither a text nor a tool_use block".into());
    }
    let finish_reason = message.stop_reason.map(finish_reason);
    let usage = message.usage.map(Usage::from);
    let reported = message.usage;
    let mut reply = Map::new();
    reply.insert("role".into(), "assistant".into());
    reply.insert("content".into(), if any_text { Value::String(text.clone()) } else { Value::Null });
    if !calls.is_empty() {
        reply.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut completion = json!({
        "object": "chat.completion",
        "model": message.model,
        "choices": [{"index": 0, "message": reply, "finish_reason": finish_reason}],
    });
    if let (Some(reported), Some(object)) = (reported, completion.as_object_mut()) {
        object.insert("usage".into(), openai_usage(reported));
    }
    Ok(Decoded { completion, text, usage, finish_reason, model: message.model })
}

/// Maps `stop_reason` onto OpenAI's `finish_reason` vocabulary.
fn finish_reason(stop_reason: String) -> String {
    match stop_reason.as_str() {
        "end_turn" | "stop_sequence" => "stop".into(),
        "max_tokens" => "length".into(),
        "tool_use" => "tool_calls".into(),
        // A streaming classifier stopped the answer: what OpenAI calls it.
        "refusal" => "content_filter".into(),
        _ => stop_reason,
    }
}

/// Stream state: `message_start` carries the input tokens, `message_delta`
/// the output tokens, and a chunk reports both. Anthropic numbers content
/// blocks (text and tool_use alike); OpenAI numbers tool calls only.
///
/// Usage is reported as OpenAI reports it: only when the request asked
/// (`stream_options.include_usage`), in a last chunk with no choices. The
/// finish chunk's [`StreamChunk::usage`] still carries it, for the caller's
/// accounting, whatever the client asked to see.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// What `message_start` reported (the prompt's tokens, cached or not).
    started: AnthropicUsage,
    /// `(content block index, tool call index)` of every tool_use block.
    tool_blocks: Vec<(u64, usize)>,
    include_usage: bool,
    usage: Option<AnthropicUsage>,
    /// Every event is kept as sent ([`StreamChunk::native`]): the request
    /// was the client's own, passed through.
    passthrough: bool,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    index: Option<u64>,
    message: Option<StartMessage>,
    content_block: Option<Block>,
    delta: Option<EventDelta>,
    usage: Option<AnthropicUsage>,
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct StartMessage {
    usage: Option<AnthropicUsage>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct EventDelta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type")]
    kind: String,
}

/// An OpenAI chunk of choice 0 with this `delta` (and `finish_reason`).
fn openai_chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
}

impl StreamState {
    /// For a request that asked for usage in its stream (`include_usage`), or not.
    pub(crate) fn new(include_usage: bool, passthrough: bool) -> StreamState {
        StreamState { include_usage, passthrough, ..StreamState::default() }
    }

    pub(crate) fn decode_event(&mut self, data: Bytes) -> Result<StreamEvent, Failure> {
        let event: Event = match serde_json::from_slice(&data) {
            Ok(event) => event,
            Err(err) => {
                return Err(Failure::bad_output(format!("stream event is not an event: {err}"), data));
            }
        };
        let mut chunk = StreamChunk {
            chunk: Value::Null,
            delta: String::new(),
            finish_reason: None,
            usage: None,
            raw: Bytes::new(),
            native: None,
            skipped: None,
        };
        if self.passthrough && !matches!(event.kind.as_str(), "message_stop" | "error" | "ping") {
            chunk.native = serde_json::from_slice(&data).ok();
        }
        match event.kind.as_str() {
            "message_stop" => {
                let usage = self.usage.take().filter(|_| self.include_usage);
                return Ok(StreamEvent::End(usage.map(|usage| StreamChunk {
                    chunk: json!({"object": "chat.completion.chunk", "choices": [], "usage": openai_usage(usage)}),
                    usage: Some(Usage::from(usage)),
                    raw: data,
                    ..chunk
                })));
            }
            "error" => {
                let status = error_status(event.error.as_ref().map_or("", |e| e.kind.as_str()));
                let body = String::from_utf8_lossy(&data).into_owned();
                return Err(Failure::Rejected { status, retry_after: None, body });
            }
            "message_start" => {
                let message = event.message.unwrap_or(StartMessage { usage: None, model: None });
                self.started = message.usage.unwrap_or_default();
                chunk.chunk = openai_chunk(json!({"role": "assistant", "content": ""}), None);
                // The model that answers, as an OpenAI stream names it.
                if let (Some(model), Some(fields)) = (message.model, chunk.chunk.as_object_mut()) {
                    fields.insert("model".into(), model.into());
                }
            }
            "content_block_start" => {
                if let Some(block) = event.content_block.filter(|b| b.kind == "tool_use") {
                    let call = self.tool_blocks.len();
                    self.tool_blocks.push((event.index.unwrap_or_default(), call));
                    let mut start = tool_call(block.id.as_deref(), block.name.as_deref(), String::new());
                    if let Some(object) = start.as_object_mut() {
                        object.insert("index".into(), call.into());
                    }
                    chunk.chunk = openai_chunk(json!({"tool_calls": [start]}), None);
                }
            }
            "content_block_delta" => match event.delta {
                Some(delta) if delta.kind.as_deref() == Some("text_delta") => {
                    chunk.delta = delta.text.unwrap_or_default();
                    chunk.chunk = openai_chunk(json!({"content": chunk.delta}), None);
                }
                Some(delta) if delta.kind.as_deref() == Some("input_json_delta") => {
                    let block = event.index.unwrap_or_default();
                    let call =
                        self.tool_blocks.iter().find(|(b, _)| *b == block).map_or(0, |(_, call)| *call);
                    let fragment = delta.partial_json.unwrap_or_default();
                    let part = json!({"index": call, "function": {"arguments": fragment}});
                    chunk.chunk = openai_chunk(json!({"tool_calls": [part]}), None);
                }
                _ => {}
            },
            "message_delta" => {
                chunk.finish_reason = event.delta.and_then(|d| d.stop_reason).map(finish_reason);
                self.usage = event.usage.map(|later| self.started.updated(later));
                chunk.usage = self.usage.map(Usage::from);
                chunk.chunk = openai_chunk(json!({}), chunk.finish_reason.as_deref());
            }
            _ => {} // ping, content_block_stop, future event types
        }
        chunk.raw = data;
        Ok(StreamEvent::Chunk(chunk))
    }
}

/// The HTTP status Anthropic uses for each error type.
fn error_status(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Message;

    #[test]
    fn system_moves_up_and_extras_pass() -> Result<(), serde_json::Error> {
        let mut req = ChatRequest::new(vec![Message::system("be brief"), Message::user("hi")]);
        req.model = Some("ignored".into());
        req.extra.insert("top_k".into(), 5.into());
        let body = request_body(&req, "claude", false)?;
        assert_eq!(
            body,
            serde_json::json!({
                "model": "claude", "max_tokens": 1024, "system": "be brief", "top_k": 5,
                "messages": [{"role": "user", "content": "hi"}]
            })
        );
        Ok(())
    }

    #[test]
    fn the_end_user_becomes_metadata_and_other_metadata_cannot_be_said() -> Result<(), serde_json::Error> {
        let req = openai(json!({"messages": [{"role": "user", "content": "hi"}], "user": "u-1"}));
        let body = request_body(&req, "claude", false)?;
        assert_eq!(body["metadata"], json!({"user_id": "u-1"}));
        assert!(body.get("user").is_none(), "the messages API refuses unknown fields");
        let tagged =
            openai(json!({"messages": [{"role": "user", "content": "hi"}], "metadata": {"run": "7"}}));
        assert!(cannot_express(&tagged).is_some_and(|why| why.contains("metadata")));
        Ok(())
    }

    /// An OpenAI-shaped request from JSON, as a client sends it.
    fn openai(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap_or_default()
    }

    #[test]
    fn tools_and_tool_choice_are_translated() -> Result<(), serde_json::Error> {
        let weather = json!({"type": "function", "function": {"name": "weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
        let bare = json!({"type": "function", "function": {"name": "now"}});
        let cases = [
            (json!("auto"), None, json!({"type": "auto"})),
            (json!("required"), None, json!({"type": "any"})),
            (json!("none"), Some(false), json!({"type": "none"})),
            (
                json!({"type": "function", "function": {"name": "now"}}),
                None,
                json!({"type": "tool", "name": "now"}),
            ),
            (json!("auto"), Some(false), json!({"type": "auto", "disable_parallel_tool_use": true})),
            (Value::Null, Some(false), json!({"type": "auto", "disable_parallel_tool_use": true})),
        ];
        for (choice, parallel, expected) in cases {
            let mut req =
                openai(json!({"messages": [{"role": "user", "content": "hi"}], "tools": [weather, bare]}));
            if !choice.is_null() {
                req.extra.insert("tool_choice".into(), choice.clone());
            }
            if let Some(parallel) = parallel {
                req.extra.insert("parallel_tool_calls".into(), parallel.into());
            }
            let body = request_body(&req, "claude", false)?;
            assert_eq!(body["tool_choice"], expected, "{choice} {parallel:?}");
            assert!(body.get("parallel_tool_calls").is_none());
            assert_eq!(
                body["tools"],
                json!([
                    {"name": "weather", "description": "d",
                     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                    {"name": "now", "input_schema": {"type": "object"}}
                ])
            );
        }
        let plain =
            openai(json!({"messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": false}));
        let body = request_body(&plain, "claude", false)?;
        assert!(body.get("tool_choice").is_none(), "no tools, no tool choice: {body}");
        Ok(())
    }

    #[test]
    fn a_tool_round_trip_becomes_tool_use_and_one_tool_result_turn() -> Result<(), serde_json::Error> {
        let req = openai(json!({"messages": [
            {"role": "user", "content": "weather in Utrecht and Delft?"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Utrecht\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Delft\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "sun"}]},
            {"role": "user", "content": "and tomorrow?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_3", "type": "function", "function": {"name": "now", "arguments": ""}}
            ]}
        ]}));
        assert_eq!(cannot_express(&req), None);
        let body = request_body(&req, "claude", false)?;
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "weather in Utrecht and Delft?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Utrecht"}},
                    {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "Delft"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "rain"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "sun"}]},
                    {"type": "text", "text": "and tomorrow?"}
                ]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_3", "name": "now", "input": {}}]}
            ])
        );
        Ok(())
    }

    #[test]
    fn image_parts_become_image_blocks() -> Result<(), serde_json::Error> {
        let req = openai(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}}
        ]}]}));
        let body = request_body(&req, "claude", false)?;
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
            ])
        );
        Ok(())
    }

    #[test]
    fn openai_only_fields_are_dropped_or_translated() -> Result<(), serde_json::Error> {
        let req = openai(json!({"messages": [{"role": "user", "content": "hi"}], "n": 1,
            "stream_options": {"include_usage": true}, "response_format": {"type": "text"},
            "stop": "END", "max_completion_tokens": 77, "top_k": 3}));
        assert_eq!(cannot_express(&req), None);
        let body = request_body(&req, "claude", true)?;
        assert_eq!(
            body,
            json!({"model": "claude", "max_tokens": 77, "stream": true, "top_k": 3, "stop_sequences": ["END"],
                "messages": [{"role": "user", "content": "hi"}]})
        );
        Ok(())
    }

    #[test]
    fn what_has_no_translation_cannot_be_expressed() {
        let user = |content: Value| openai(json!({"messages": [{"role": "user", "content": content}]}));
        let audio = user(json!([{"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}]));
        let file = user(json!([{"type": "file", "file": {"file_id": "file-1"}}]));
        let bad_args = openai(json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"city\":"}}]}]}));
        for (req, why) in [(audio, "input_audio"), (file, "file"), (bad_args, "not JSON")] {
            let reason = cannot_express(&req).unwrap_or_default();
            assert!(reason.contains(why), "{why}: {reason}");
        }
        let bad_args = openai(json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "nope"}}]}]}));
        assert!(request_body(&bad_args, "claude", false).is_err(), "never sent with the call dropped");
    }

    #[test]
    fn error_event_is_rejected_with_anthropic_status() {
        let data =
            Bytes::from_static(br#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#);
        let failure = StreamState::default().decode_event(data).err();
        assert!(matches!(failure, Some(Failure::Rejected { status: 529, .. })));
    }
}
