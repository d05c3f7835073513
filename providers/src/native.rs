//! A client's request in its own protocol, carried beside the chat view
//! every dialect can be rendered from, so that a provider whose dialect
//! speaks that protocol is sent what the client sent — thinking, cache
//! breakpoints, structured outputs, betas — and answers in it, while a
//! provider of another dialect is sent the translation, or passed over when
//! the translation would leave out something that matters.

use serde_json::{Map, Value};

use crate::dialect::Dialect;

/// A client protocol a dialect may speak natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Anthropic's Messages API (`POST /v1/messages`).
    AnthropicMessages,
    /// OpenAI's Responses API (`POST /v1/responses`).
    OpenAiResponses,
}

impl Protocol {
    /// Its name, as the job's door is recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::AnthropicMessages => "anthropic-messages",
            Protocol::OpenAiResponses => "openai-responses",
        }
    }

    /// Whether `dialect` is sent this protocol's requests as they are
    /// (Bedrock's `InvokeModel` takes Anthropic's Messages body).
    pub fn spoken_by(self, dialect: Dialect) -> bool {
        matches!(
            (self, dialect),
            (Protocol::AnthropicMessages, Dialect::Anthropic | Dialect::Bedrock)
                | (Protocol::OpenAiResponses, Dialect::OpenAiResponses)
        )
    }
}

/// The client's request in its protocol (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Native {
    pub protocol: Protocol,
    /// The request body, without `stream` (how the answer is delivered is
    /// the gateway's to say on each attempt).
    pub body: Map<String, Value>,
    /// Headers that change what the provider does (`anthropic-beta`,
    /// `anthropic-version`), lower-case names.
    pub headers: Vec<(String, String)>,
    /// What the chat view leaves out that changes the answer (a `thinking`
    /// configuration, a signed thinking block, a server tool): a provider
    /// of another dialect cannot be sent the request without dropping it.
    pub untranslated: Vec<String>,
}

impl Native {
    /// Why a provider of `dialect` cannot be sent this request, or `None`
    /// when it speaks the protocol or the chat view holds all that matters.
    pub fn cannot_express(&self, dialect: Dialect) -> Option<String> {
        if self.protocol.spoken_by(dialect) || self.untranslated.is_empty() {
            return None;
        }
        Some(format!(
            "the {} request carries {}, which a {} provider cannot be sent: it is not translated, never dropped",
            self.protocol.as_str(),
            self.untranslated.join(", "),
            dialect.as_str(),
        ))
    }
}

/// The whole answer a passed-through stream's events make, so a plain
/// request for a streamed job answers with what the stream said:
/// Anthropic's `message` (its start, each block with its deltas applied —
/// text, thinking and its signature, a tool call's input — and the final
/// stop reason and usage), or the `response` a Responses stream's last
/// event carries whole. `None` when the events hold no such answer.
pub fn assemble(protocol: Protocol, events: &[&Value]) -> Option<Value> {
    match protocol {
        Protocol::AnthropicMessages => assemble_message(events),
        Protocol::OpenAiResponses => events
            .iter()
            .rev()
            .find(|e| matches!(e["type"].as_str(), Some("response.completed" | "response.incomplete")))
            .map(|e| e["response"].clone()),
    }
}

fn assemble_message(events: &[&Value]) -> Option<Value> {
    let mut message = events.iter().find(|e| e["type"] == "message_start")?.get("message")?.clone();
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial_json: Vec<String> = Vec::new();
    for event in events {
        let index = event["index"].as_u64().and_then(|i| usize::try_from(i).ok()).unwrap_or(0);
        match event["type"].as_str() {
            Some("content_block_start") => {
                blocks.resize(blocks.len().max(index + 1), Value::Null);
                partial_json.resize(blocks.len(), String::new());
                blocks[index] = event["content_block"].clone();
            }
            Some("content_block_delta") if index < blocks.len() => {
                apply_delta(&mut blocks[index], &mut partial_json[index], &event["delta"]);
            }
            Some("message_delta") => {
                if let Some(delta) = event["delta"].as_object() {
                    delta.iter().for_each(|(key, value)| message[key.as_str()] = value.clone());
                }
                if let (Some(usage), Some(reported)) =
                    (message["usage"].as_object_mut(), event["usage"].as_object())
                {
                    usage.extend(reported.iter().map(|(key, value)| (key.clone(), value.clone())));
                }
            }
            _ => {}
        }
    }
    for (block, json) in blocks.iter_mut().zip(&partial_json) {
        if !json.is_empty() {
            block["input"] = serde_json::from_str(json).unwrap_or(Value::String(json.clone()));
        }
    }
    message["content"] = Value::Array(blocks);
    Some(message)
}

/// One `content_block_delta` applied to its block.
fn apply_delta(block: &mut Value, partial_json: &mut String, delta: &Value) {
    let append = |block: &mut Value, field: &str, more: &Value| {
        let text =
            format!("{}{}", block[field].as_str().unwrap_or_default(), more.as_str().unwrap_or_default());
        block[field] = Value::String(text);
    };
    match delta["type"].as_str() {
        Some("text_delta") => append(block, "text", &delta["text"]),
        Some("thinking_delta") => append(block, "thinking", &delta["thinking"]),
        Some("signature_delta") => append(block, "signature", &delta["signature"]),
        Some("citations_delta") => {
            if let Some(citations) = block.get_mut("citations").and_then(Value::as_array_mut) {
                citations.push(delta["citation"].clone());
            } else {
                block["citations"] = Value::Array(vec![delta["citation"].clone()]);
            }
        }
        Some("input_json_delta") => partial_json.push_str(delta["partial_json"].as_str().unwrap_or_default()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_thinking_stream_assembles_into_its_message() {
        let events = [
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
                "content": [], "model": "claude", "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "see."}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "ls", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\".\"}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 9, "cache_read_input_tokens": 3}}),
        ];
        let refs: Vec<&Value> = events.iter().collect();
        let message = assemble(Protocol::AnthropicMessages, &refs).unwrap_or_default();
        assert_eq!(
            message["content"][0],
            json!({"type": "thinking", "thinking": "Let me see.", "signature": "sig"})
        );
        assert_eq!(message["content"][1]["input"], json!({"path": "."}));
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["usage"],
            json!({"input_tokens": 5, "output_tokens": 9, "cache_read_input_tokens": 3})
        );
    }
}
