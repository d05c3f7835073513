//! What the simulator answers: deterministic content (randomness only from
//! the seed) in either dialect, whole or as SSE events.

use serde_json::{Map, Value, json};

use super::script::Output;
use crate::config::Dialect;

/// What the simulator reads from a request.
pub(crate) struct Prompt {
    pub(crate) model: String,
    pub(crate) last_user: String,
    pub(crate) prompt_words: u64,
    pub(crate) wants_json: bool,
    /// Keys of the asked JSON schema's properties, kept in the answer.
    pub(crate) keys: Vec<String>,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// Seed and request mixed, so ids are stable per request and seed.
    pub(crate) nonce: u64,
}

impl Prompt {
    pub(crate) fn read(body: &Value, seed: u64) -> Prompt {
        let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let text_of = |message: &Value| message.get("content").map(content_text).unwrap_or_default();
        let top_system = body.get("system").map(content_text).unwrap_or_default();
        let mut system: Vec<String> = messages
            .iter()
            .filter(|m| matches!(m.get("role").and_then(Value::as_str), Some("system" | "developer")))
            .map(text_of)
            .collect();
        system.push(top_system.clone());
        let last_user = messages
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(text_of)
            .unwrap_or_default();
        let prompt_words = messages.iter().map(|m| words(&text_of(m))).sum::<u64>() + words(&top_system);
        let format = body.get("response_format");
        let format_type = format.and_then(|f| f.get("type")).and_then(Value::as_str);
        let schema = format.and_then(|f| f.pointer("/json_schema/schema").or_else(|| f.get("schema")));
        let keys = schema
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|props| props.keys().cloned().collect())
            .unwrap_or_default();
        Prompt {
            model: body.get("model").and_then(Value::as_str).unwrap_or("sim").to_owned(),
            wants_json: matches!(format_type, Some("json_object" | "json_schema"))
                || system.iter().any(|s| s.to_ascii_lowercase().contains("json")),
            keys,
            prompt_words,
            last_user,
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            include_usage: body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            nonce: fnv1a(seed, body.to_string().as_bytes()),
        }
    }

    /// The answer's text, shaped by the script's output faults.
    pub(crate) fn answer(&self, seed: u64, output: &Output) -> String {
        if output.ignore_format {
            return format!("Sure! Here is my answer, in prose rather than JSON: {}", self.last_user);
        }
        if !self.wants_json && !output.invent_key {
            return format!("echo: {}", self.last_user);
        }
        let snippet: Vec<&str> = self.last_user.split_whitespace().take(4).collect();
        let mut object = Map::new();
        for key in &self.keys {
            let value = if snippet.is_empty() { key.clone() } else { snippet.join(" ") };
            object.insert(key.clone(), value.into());
        }
        if self.keys.is_empty() {
            object.insert("answer".into(), format!("echo: {}", self.last_user).into());
        }
        if output.invent_key {
            object.insert(
                format!("invented_{:04x}", fnv1a(seed, b"invent") & 0xffff),
                "nobody asked for this".into(),
            );
        }
        Value::Object(object).to_string()
    }

    pub(crate) fn usage(&self, answer: &str) -> (u64, u64) {
        (self.prompt_words, words(answer))
    }
}

/// A whole (non-streamed) response body.
pub(crate) fn body(dialect: Dialect, prompt: &Prompt, answer: &str) -> Value {
    let (input, output) = prompt.usage(answer);
    match dialect {
        Dialect::OpenAi => json!({
            "id": format!("chatcmpl-sim{:016x}", prompt.nonce),
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": prompt.model,
            "system_fingerprint": "fp_sim",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
        }),
        Dialect::Anthropic => json!({
            "id": format!("msg_sim{:016x}", prompt.nonce),
            "type": "message",
            "role": "assistant",
            "model": prompt.model,
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": output},
        }),
    }
}

/// One SSE event: optional `event:` name and its `data:` payload.
pub(crate) struct Event {
    pub(crate) name: Option<&'static str>,
    pub(crate) data: String,
}

impl Event {
    pub(crate) fn to_sse(&self) -> String {
        match self.name {
            Some(name) => format!("event: {name}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        }
    }
}

/// The events of a streamed answer, and separately its terminator.
pub(crate) fn events(dialect: Dialect, prompt: &Prompt, answer: &str) -> (Vec<Event>, Event) {
    let (input, output) = prompt.usage(answer);
    let pieces = pieces(answer);
    match dialect {
        Dialect::OpenAi => {
            let id = format!("chatcmpl-sim{:016x}", prompt.nonce);
            let chunk = |delta: Value, finish: Value| {
                Event {
                name: None,
                data: json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": prompt.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                .to_string(),
            }
            };
            let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
            events.extend(pieces.iter().map(|piece| chunk(json!({"content": piece}), Value::Null)));
            events.push(chunk(json!({}), "stop".into()));
            if prompt.include_usage {
                let usage = json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output});
                let data = json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": prompt.model, "choices": [], "usage": usage});
                events.push(Event { name: None, data: data.to_string() });
            }
            (events, Event { name: None, data: "[DONE]".into() })
        }
        Dialect::Anthropic => {
            let event = |name: &'static str, data: Value| Event { name: Some(name), data: data.to_string() };
            let message = json!({"id": format!("msg_sim{:016x}", prompt.nonce), "type": "message", "role": "assistant",
                "model": prompt.model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 1}});
            let mut events = vec![
                event("message_start", json!({"type": "message_start", "message": message})),
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                event("ping", json!({"type": "ping"})),
            ];
            events.extend(pieces.iter().map(|piece| {
                event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}))
            }));
            events.push(event("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
            events.push(event("message_delta", json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": output}})));
            (events, event("message_stop", json!({"type": "message_stop"})))
        }
    }
}

/// An error body in the dialect's shape.
pub(crate) fn error(dialect: Dialect, status: u16, message: &str) -> Value {
    match dialect {
        Dialect::OpenAi => json!({"error": {"message": message, "type": "sim_error", "code": status}}),
        Dialect::Anthropic => {
            let kind = match status {
                400 => "invalid_request_error",
                401 => "authentication_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

/// The first half of `text`, cut on a char boundary: never valid JSON when
/// `text` is a JSON object.
pub(crate) fn truncated(text: &str) -> &str {
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// Up to four pieces that concatenate back to `text`.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(chars.len().div_ceil(4).max(1)).map(|c| c.iter().collect()).collect()
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325 ^ seed, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_keys_shape_the_answer() -> Result<(), serde_json::Error> {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "name the capital of France"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {"city": {}, "country": {}}}}}});
        let prompt = Prompt::read(&body, 7);
        let answer: Value = serde_json::from_str(&prompt.answer(7, &Output::default()))?;
        assert_eq!(answer, json!({"city": "name the capital of", "country": "name the capital of"}));
        let plain = Prompt::read(&json!({"messages": [{"role": "user", "content": "hi there"}]}), 7);
        assert_eq!(plain.answer(7, &Output::default()), "echo: hi there");
        assert_eq!(pieces("abcdefghij").concat(), "abcdefghij");
        assert!(serde_json::from_str::<Value>(truncated(r#"{"a":"é"}"#)).is_err());
        Ok(())
    }
}
