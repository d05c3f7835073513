//! The simulator's Bedrock `Converse` API (`POST /model/{modelId}/converse`
//! and `…/converse-stream`), authenticated as `InvokeModel` is (see
//! `bedrock.rs`) and as strict as AWS about the body: only Converse's own
//! fields, turns that alternate from a user's, content blocks of known
//! kinds, and tool blocks only beside a `toolConfig`.
//!
//! The answer is the Anthropic dialect's, read through an Anthropic view of
//! the request ([`view`]) and said again in Converse's shapes: a whole
//! response ([`body`]) or Converse's stream events, each in its own
//! event-stream frame ([`frames`]), `metadata` (the usage) the last.

use axum::body::Bytes;
use serde_json::{Value, json};

use super::prompt::Event;
use crate::bedrock::eventstream;

/// The top-level fields Converse takes.
const FIELDS: [&str; 10] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "guardrailConfig",
    "performanceConfig",
    "promptVariables",
    "requestMetadata",
];

/// The content blocks a message may hold, one kind per block.
const BLOCKS: [&str; 7] =
    ["text", "image", "document", "toolUse", "toolResult", "reasoningContent", "cachePoint"];

/// What Bedrock refuses in a Converse body.
pub(crate) fn validate(json: &Value) -> Result<(), (u16, String)> {
    let malformed = |why: String| Err((400, format!("Malformed input request: {why}")));
    let Some(fields) = json.as_object() else { return malformed("the body is not an object".into()) };
    if let Some(field) = fields.keys().find(|field| !FIELDS.contains(&field.as_str())) {
        return malformed(format!("extraneous key [{field}] is not permitted"));
    }
    let Some(messages) = json.get("messages").and_then(Value::as_array) else {
        return malformed("required key [messages] not found".into());
    };
    let mut expected = "user";
    for message in messages {
        if message.get("role").and_then(Value::as_str) != Some(expected) {
            return Err((
                400,
                "A conversation must alternate between user and assistant roles, starting with a user."
                    .into(),
            ));
        }
        expected = if expected == "user" { "assistant" } else { "user" };
        let blocks = message.get("content").and_then(Value::as_array).filter(|blocks| !blocks.is_empty());
        let Some(blocks) = blocks else {
            return malformed("a message's content must be a non-empty array".into());
        };
        for block in blocks {
            let kinds: Vec<&String> = block.as_object().map(|b| b.keys().collect()).unwrap_or_default();
            if kinds.len() != 1 || !BLOCKS.contains(&kinds[0].as_str()) {
                return malformed(format!("a content block must be one of {BLOCKS:?}: {block}"));
            }
            let tool = matches!(kinds[0].as_str(), "toolUse" | "toolResult");
            if tool && json.get("toolConfig").is_none() {
                return Err((
                    400,
                    "The toolConfig field must be defined when using toolUse and toolResult content blocks."
                        .into(),
                ));
            }
        }
    }
    let allowed = ["maxTokens", "temperature", "topP", "stopSequences"];
    let config = json.get("inferenceConfig").and_then(Value::as_object);
    if let Some(field) = config.and_then(|c| c.keys().find(|k| !allowed.contains(&k.as_str()))) {
        return malformed(format!("inferenceConfig: extraneous key [{field}] is not permitted"));
    }
    Ok(())
}

/// The request as the Anthropic dialect's answers read it.
pub(crate) fn view(json: &Value, model: &str, stream: bool) -> Value {
    let system: Vec<&str> = blocks(json.get("system")).filter_map(|b| b.get("text")?.as_str()).collect();
    let messages: Vec<Value> = json
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| json!({"role": m.get("role"), "content": blocks(m.get("content")).map(anthropic_block).collect::<Vec<_>>()}))
        .collect();
    let mut view = json!({"model": model, "stream": stream, "messages": messages,
        "max_tokens": json.pointer("/inferenceConfig/maxTokens").cloned().unwrap_or(json!(1024))});
    let Some(object) = view.as_object_mut() else { return view };
    if !system.is_empty() {
        object.insert("system".into(), system.join("\n\n").into());
    }
    let specs = blocks(json.pointer("/toolConfig/tools")).filter_map(|tool| tool.get("toolSpec"));
    let tools: Vec<Value> = specs
        .map(|spec| {
            json!({"name": spec.get("name"), "description": spec.get("description"),
            "input_schema": spec.pointer("/inputSchema/json")})
        })
        .collect();
    if !tools.is_empty() {
        object.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = json.pointer("/toolConfig/toolChoice").and_then(Value::as_object) {
        let choice = match choice.keys().next().map(String::as_str) {
            Some("any") => json!({"type": "any"}),
            Some("tool") => json!({"type": "tool", "name": choice.get("tool").and_then(|t| t.get("name"))}),
            _ => json!({"type": "auto"}),
        };
        object.insert("tool_choice".into(), choice);
    }
    view
}

fn blocks(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default().iter()
}

/// One Converse content block as Anthropic's.
fn anthropic_block(block: &Value) -> Value {
    if let Some(text) = block.get("text") {
        return json!({"type": "text", "text": text});
    }
    if let Some(tool) = block.get("toolUse") {
        return json!({"type": "tool_use", "id": tool.get("toolUseId"), "name": tool.get("name"),
            "input": tool.get("input")});
    }
    if let Some(result) = block.get("toolResult") {
        let text: Vec<&str> = blocks(result.get("content")).filter_map(|b| b.get("text")?.as_str()).collect();
        return json!({"type": "tool_result", "tool_use_id": result.get("toolUseId"), "content": text.join("")});
    }
    json!({"type": "text", "text": ""})
}

/// An Anthropic message as Converse's response.
pub(crate) fn body(message: &Value) -> Value {
    let content: Vec<Value> = blocks(message.get("content"))
        .filter_map(|block| match block.get("type").and_then(Value::as_str) {
            Some("text") => Some(json!({"text": block.get("text")})),
            Some("tool_use") => {
                Some(json!({"toolUse": {"toolUseId": block.get("id"), "name": block.get("name"),
                "input": block.get("input")}}))
            }
            _ => None,
        })
        .collect();
    let usage = message.get("usage").cloned().unwrap_or_default();
    json!({"output": {"message": {"role": "assistant", "content": content}},
        "stopReason": message.get("stop_reason"), "usage": usage_of(&usage, None), "metrics": {"latencyMs": 1}})
}

/// Anthropic's usage (and a later output count) as Converse's.
fn usage_of(usage: &Value, output: Option<u64>) -> Value {
    let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    let (input, read, write) =
        (count("input_tokens"), count("cache_read_input_tokens"), count("cache_creation_input_tokens"));
    let output = output.unwrap_or_else(|| count("output_tokens"));
    json!({"inputTokens": input, "outputTokens": output, "totalTokens": input + read + write + output,
        "cacheReadInputTokens": read, "cacheWriteInputTokens": write})
}

/// An Anthropic stream's events as Converse's event frames, and its
/// terminator's: `metadata`, with the usage. An event whose data is not
/// JSON (a scripted malformed event) goes out as it is, in a
/// `contentBlockDelta` frame.
pub(crate) fn frames(events: &[Event]) -> (Vec<Bytes>, Vec<Bytes>) {
    let mut usage = Value::Null;
    let mut output = None;
    let mut frames = Vec::new();
    for event in events {
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            frames.push(frame("contentBlockDelta", event.data.as_bytes()));
            continue;
        };
        let index = data.get("index").cloned().unwrap_or(json!(0));
        let converse = match data.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => {
                usage = data.pointer("/message/usage").cloned().unwrap_or_default();
                Some(("messageStart", json!({"role": "assistant"})))
            }
            "content_block_start" => {
                data.pointer("/content_block").filter(|b| b["type"] == "tool_use").map(|b| {
                    (
                        "contentBlockStart",
                        json!({"contentBlockIndex": index,
                    "start": {"toolUse": {"toolUseId": b.get("id"), "name": b.get("name")}}}),
                    )
                })
            }
            "content_block_delta" => match data.pointer("/delta/type").and_then(Value::as_str) {
                Some("text_delta") => Some((
                    "contentBlockDelta",
                    json!({"contentBlockIndex": index, "delta": {"text": data.pointer("/delta/text")}}),
                )),
                Some("input_json_delta") => Some((
                    "contentBlockDelta",
                    json!({"contentBlockIndex": index,
                    "delta": {"toolUse": {"input": data.pointer("/delta/partial_json")}}}),
                )),
                _ => None,
            },
            "content_block_stop" => Some(("contentBlockStop", json!({"contentBlockIndex": index}))),
            "message_delta" => {
                output = data.pointer("/usage/output_tokens").and_then(Value::as_u64);
                Some(("messageStop", json!({"stopReason": data.pointer("/delta/stop_reason")})))
            }
            _ => None,
        };
        frames.extend(converse.map(|(kind, payload)| frame(kind, payload.to_string().as_bytes())));
    }
    let metadata = json!({"usage": usage_of(&usage, output), "metrics": {"latencyMs": 1}});
    (frames, vec![frame("metadata", metadata.to_string().as_bytes())])
}

fn frame(kind: &str, payload: &[u8]) -> Bytes {
    eventstream::encode(
        &[(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        payload,
    )
}
