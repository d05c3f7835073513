//! The simulator's OpenAI Responses API (`POST /v1/responses`): strict
//! about its request as OpenAI is (chat's `messages`, `max_tokens`,
//! `response_format` or `stream_options.include_usage` are refused by
//! name, an unknown field or item type is refused), it answers a `response`
//! object or its event stream.
//!
//! Reasoning: a request with `reasoning.effort` (other than `none`) is
//! answered with a reasoning item before its output, its `summary` shown
//! when `reasoning.summary` asks, its `encrypted_content` sent when
//! `include` asks for `reasoning.encrypted_content`, and its tokens
//! counted as `reasoning_tokens`. A reasoning item sent back must carry
//! the encrypted content this simulator sealed for that item id, unchanged
//! — else OpenAI's 400 — so a test catches reasoning that was altered,
//! dropped or made up. Nothing is stored: `previous_response_id` is
//! refused as OpenAI refuses an id it does not know.

use serde_json::{Map, Value, json};

use super::prompt::{Event, Prompt, Said, pieces, usage};
use super::seal::{seal, verify};

/// Top-level fields the Responses API takes.
const FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "max_output_tokens",
    "max_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "metadata",
    "previous_response_id",
    "stream",
    "stream_options",
    "store",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "background",
    "reasoning",
    "include",
    "truncation",
    "service_tier",
    "client_metadata",
];

/// Chat fields a client might send here by mistake, with OpenAI's advice.
const MOVED: &[(&str, &str)] = &[
    ("messages", "use `input`"),
    ("max_tokens", "use `max_output_tokens`"),
    ("response_format", "in the Responses API, this parameter has moved to `text.format`"),
    ("n", "the Responses API answers one output"),
];

/// The request checked and read into the chat-shaped view the simulator's
/// prompt reader takes (`reasoning`, `include` and `prompt_cache_key` kept
/// for the answer), or OpenAI's 400 and its message.
pub(crate) fn view(json: &Value) -> Result<Value, (u16, String)> {
    let refuse = |message: String| Err((400, message));
    let Some(fields) = json.as_object() else { return refuse("the body must be a JSON object".into()) };
    for (field, advice) in MOVED {
        if fields.contains_key(*field) {
            return refuse(format!("Unsupported parameter: '{field}': {advice}."));
        }
    }
    if let Some(unknown) = fields.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return refuse(format!("Unknown parameter: '{unknown}'."));
    }
    if fields.get("stream_options").and_then(|o| o.get("include_usage")).is_some() {
        return refuse("Unknown parameter: 'stream_options.include_usage'.".into());
    }
    if let Some(id) = fields.get("previous_response_id").and_then(Value::as_str) {
        return refuse(format!("Previous response with id '{id}' not found."));
    }
    if !fields.get("model").is_some_and(Value::is_string) {
        return refuse("Missing required parameter: 'model'.".into());
    }
    let stored = fields.get("store").and_then(Value::as_bool).unwrap_or(true);
    let mut messages = Vec::new();
    if let Some(instructions) = fields.get("instructions").and_then(Value::as_str) {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match fields.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                read_item(&mut messages, item, stored)
                    .map_err(|message| (400, format!("input[{index}]: {message}")))?;
            }
        }
        _ => return refuse("Missing required parameter: 'input'.".into()),
    }
    let mut view = Map::new();
    view.insert("model".into(), fields["model"].clone());
    view.insert("messages".into(), messages.into());
    view.insert("stream".into(), fields.get("stream").cloned().unwrap_or(false.into()));
    // A Responses stream always reports usage, in its last event.
    view.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(tools) = fields.get("tools").and_then(Value::as_array) {
        view.insert("tools".into(), tools.iter().filter_map(chat_tool).collect());
    }
    if let Some(choice) = fields.get("tool_choice") {
        let choice = match choice.get("name") {
            Some(name) if choice["type"] == "function" => {
                json!({"type": "function", "function": {"name": name}})
            }
            _ => choice.clone(),
        };
        view.insert("tool_choice".into(), choice);
    }
    if let Some(format) = fields.get("text").and_then(|text| text.get("format")) {
        view.insert("response_format".into(), response_format(format));
    }
    for kept in ["reasoning", "include", "prompt_cache_key"] {
        if let Some(value) = fields.get(kept) {
            view.insert(kept.into(), value.clone());
        }
    }
    Ok(Value::Object(view))
}

/// One input item onto the chat messages; a reasoning item is checked.
fn read_item(messages: &mut Vec<Value>, item: &Value, stored: bool) -> Result<(), String> {
    match item.get("type").and_then(Value::as_str) {
        None | Some("message") => {
            let role = item.get("role").and_then(Value::as_str).ok_or("a message needs a `role`")?;
            let content = match &item["content"] {
                Value::String(text) => Value::String(text.clone()),
                Value::Array(parts) => parts
                    .iter()
                    .map(|part| match part.get("type").and_then(Value::as_str) {
                        Some("input_text" | "output_text") => {
                            Ok(json!({"type": "text", "text": part["text"]}))
                        }
                        Some("refusal") => Ok(json!({"type": "text", "text": part["refusal"]})),
                        Some("input_image") => Ok(json!({"type": "text", "text": ""})),
                        other => Err(format!("Invalid value: '{}'.", other.unwrap_or("?"))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .into(),
                _ => return Err("Invalid type for 'content'.".into()),
            };
            messages.push(json!({"role": role, "content": content}));
        }
        Some("function_call" | "custom_tool_call") => {
            let arguments =
                item.get("arguments").or_else(|| item.get("input")).cloned().unwrap_or("{}".into());
            let call = json!({"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": arguments}});
            match messages.last_mut() {
                Some(last) if last["role"] == "assistant" && last["tool_calls"].is_array() => {
                    if let Some(calls) = last["tool_calls"].as_array_mut() {
                        calls.push(call);
                    }
                }
                _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let output = match &item["output"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            messages.push(json!({"role": "tool", "tool_call_id": item["call_id"], "content": output}));
        }
        Some("reasoning") => check_reasoning(item, stored)?,
        Some(other) => return Err(format!("Invalid value: '{other}'.")),
    }
    Ok(())
}

/// A reasoning item sent back: its encrypted content must be the one
/// sealed for its id; without it, only a stored response could say what it was.
fn check_reasoning(item: &Value, stored: bool) -> Result<(), String> {
    let id = item.get("id").and_then(Value::as_str).unwrap_or_default();
    match item.get("encrypted_content").and_then(Value::as_str) {
        Some(sealed) if verify("reasoning", id, sealed) => Ok(()),
        Some(_) => Err(format!("The encrypted content for item {id} could not be verified.")),
        None if !stored => Err(format!(
            "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again \
             with `store` set to true, or remove this item from your input."
        )),
        None => Err(format!("Item with id '{id}' not found.")),
    }
}

/// A function tool in chat's shape; other tools (custom, web search) are
/// offered but never called by the simulator.
fn chat_tool(tool: &Value) -> Option<Value> {
    (tool["type"] == "function").then(|| {
        json!({"type": "function", "function": {"name": tool["name"],
            "parameters": tool.get("parameters").cloned().unwrap_or(json!({}))}})
    })
}

fn response_format(format: &Value) -> Value {
    match format["type"].as_str() {
        Some("json_schema") => json!({"type": "json_schema",
            "json_schema": {"name": format["name"], "schema": format["schema"]}}),
        Some(kind) => json!({"type": kind}),
        None => Value::Null,
    }
}

/// The reasoning an answer carries, when the request asked for any.
struct Reasoning {
    item: Value,
    tokens: u64,
}

fn reasoning(prompt: &Prompt, request: &Value) -> Option<Reasoning> {
    let effort = request.pointer("/reasoning/effort").and_then(Value::as_str)?;
    if effort == "none" {
        return None;
    }
    let id = format!("rs_sim{:016x}", prompt.nonce);
    let thought = format!("Thinking about: {}", prompt.last_user);
    let tokens = thought.split_whitespace().count() as u64;
    let summary = match request.pointer("/reasoning/summary") {
        Some(Value::String(_)) => json!([{"type": "summary_text", "text": thought}]),
        _ => json!([]),
    };
    let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
    let include = request.get("include").and_then(Value::as_array).into_iter().flatten();
    if include.into_iter().any(|asked| asked == "reasoning.encrypted_content") {
        item["encrypted_content"] = seal("reasoning", &id).into();
    }
    Some(Reasoning { item, tokens })
}

/// The output item of what was said.
fn output_item(prompt: &Prompt, said: &Said) -> Value {
    match said {
        Said::Tool(call) => json!({"type": "function_call", "id": format!("fc_sim{:016x}", prompt.nonce),
            "call_id": call.id, "name": call.name, "arguments": call.arguments, "status": "completed"}),
        Said::Text(text) | Said::Stopped(text) => json!({"type": "message",
            "id": format!("msg_sim{:016x}", prompt.nonce), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}),
    }
}

/// A whole `response` object (its status and output as given).
fn response(prompt: &Prompt, request: &Value, said: &[Said], done: bool) -> Value {
    let reasoning = reasoning(prompt, request);
    let (input, output) = usage(prompt, said);
    let thought = reasoning.as_ref().map_or(0, |r| r.tokens);
    let cached = if request.get("prompt_cache_key").is_some() { input / 2 } else { 0 };
    let stopped = matches!(said.first(), Some(Said::Stopped(_)));
    let status = match (done, stopped) {
        (false, _) => "in_progress",
        (true, true) => "incomplete",
        (true, false) => "completed",
    };
    let items: Vec<Value> = match done {
        false => Vec::new(),
        true => reasoning
            .map(|r| r.item)
            .into_iter()
            .chain(said.first().map(|s| output_item(prompt, s)))
            .collect(),
    };
    let usage = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output + thought, "output_tokens_details": {"reasoning_tokens": thought},
        "total_tokens": input + output + thought});
    json!({"id": format!("resp_sim{:016x}", prompt.nonce), "object": "response", "created_at": 1_700_000_000,
        "status": status, "model": prompt.model, "output": items, "error": null,
        "incomplete_details": if stopped && done { json!({"reason": "content_filter"}) } else { Value::Null },
        "usage": if done { usage } else { Value::Null }})
}

/// A whole (non-streamed) answer.
pub(crate) fn body(prompt: &Prompt, request: &Value, said: &[Said]) -> Value {
    response(prompt, request, said, true)
}

/// The events of a streamed answer, and separately its last one
/// (`response.completed`, or `.incomplete` after a safety stop).
pub(crate) fn events(prompt: &Prompt, request: &Value, said: &[Said]) -> (Vec<Event>, Event) {
    let whole = response(prompt, request, said, true);
    let mut sequence = 0u64;
    let mut event = |name: &'static str, mut data: Value| {
        data["type"] = name.into();
        data["sequence_number"] = sequence.into();
        sequence += 1;
        Event { name: Some(name), data: data.to_string() }
    };
    let started = response(prompt, request, said, false);
    let mut events = vec![
        event("response.created", json!({"response": started})),
        event("response.in_progress", json!({"response": started})),
    ];
    for (index, item) in whole["output"].as_array().into_iter().flatten().enumerate() {
        events.extend(item_events(&mut event, index, item));
    }
    let last = if whole["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
    let terminator = event(last, json!({"response": whole}));
    (events, terminator)
}

/// One output item's events: added (empty), its deltas, done (whole).
fn item_events(
    event: &mut impl FnMut(&'static str, Value) -> Event,
    index: usize,
    item: &Value,
) -> Vec<Event> {
    let id = &item["id"];
    let mut empty = item.clone();
    let mut out = Vec::new();
    match item["type"].as_str() {
        Some("message") => {
            empty["content"] = json!([]);
            empty["status"] = "in_progress".into();
            out.push(event("response.output_item.added", json!({"output_index": index, "item": empty})));
            let text = item.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default();
            let part =
                |text: &str| json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
            let at = json!({"item_id": id, "output_index": index, "content_index": 0});
            let with = |mut at: Value, key: &str, value: Value| {
                at[key] = value;
                at
            };
            out.push(event("response.content_part.added", with(at.clone(), "part", part(""))));
            for piece in pieces(text) {
                let delta = with(with(at.clone(), "delta", piece.into()), "logprobs", json!([]));
                out.push(event("response.output_text.delta", delta));
            }
            out.push(event("response.output_text.done", with(at.clone(), "text", text.into())));
            out.push(event("response.content_part.done", with(at, "part", part(text))));
        }
        Some("function_call") => {
            empty["arguments"] = "".into();
            empty["status"] = "in_progress".into();
            out.push(event("response.output_item.added", json!({"output_index": index, "item": empty})));
            let arguments = item["arguments"].as_str().unwrap_or_default();
            for piece in pieces(arguments) {
                let delta = json!({"item_id": id, "output_index": index, "delta": piece});
                out.push(event("response.function_call_arguments.delta", delta));
            }
            let done =
                json!({"item_id": id, "output_index": index, "name": item["name"], "arguments": arguments});
            out.push(event("response.function_call_arguments.done", done));
        }
        _ => out.push(event("response.output_item.added", json!({"output_index": index, "item": item}))),
    }
    out.push(event("response.output_item.done", json!({"output_index": index, "item": item})));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_fields_and_unknown_items_are_refused_by_name() {
        let chat = json!({"model": "m", "messages": []});
        assert!(view(&chat).is_err_and(|(_, m)| m.contains("'messages'")));
        let unknown = json!({"model": "m", "input": [{"type": "telepathy"}]});
        assert!(view(&unknown).is_err_and(|(_, m)| m.contains("telepathy")));
        let usage = json!({"model": "m", "input": "x", "stream_options": {"include_usage": true}});
        assert!(view(&usage).is_err());
        assert!(view(&json!({"model": "m", "input": "x", "store": false})).is_ok());
    }

    #[test]
    fn reasoning_comes_back_only_as_it_was_sealed() {
        let id = "rs_sim1";
        let back = |content: Value| {
            json!({"model": "m", "store": false, "input": [{"type": "reasoning", "id": id, "summary": [],
                "encrypted_content": content}, {"role": "user", "content": "go on"}]})
        };
        assert!(view(&back(seal("reasoning", id).into())).is_ok());
        let altered = format!("{}x", seal("reasoning", id));
        assert!(view(&back(altered.into())).is_err_and(|(_, m)| m.contains("could not be verified")));
        let missing =
            json!({"model": "m", "store": false, "input": [{"type": "reasoning", "id": id, "summary": []}]});
        assert!(view(&missing).is_err_and(|(_, m)| m.contains("not persisted")));
    }
}
