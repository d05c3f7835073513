//! An OpenAI-shaped request translated into the messages API, so a
//! conversation (tools, tool results, images) can fail over from an
//! OpenAI-dialect provider to an Anthropic one without the client noticing.
//!
//! What has no translation is an error with the reason: `cannot_express`
//! reports it before the engine picks the provider, and `request_body`
//! refuses to build a body rather than send the request with it dropped.

use serde_json::{Map, Value, json};

use crate::types::{ChatRequest, Content, Message};

/// Fields OpenAI clients commonly send that the messages API rejects and
/// that mean nothing (or are translated elsewhere) there.
const DROPPED: [&str; 7] = [
    "parallel_tool_calls",
    "stream_options",
    "tools",
    "tool_choice",
    "max_completion_tokens",
    "stop",
    "user",
];

/// Why `req` cannot be said in the messages API, if it cannot.
///
/// A JSON `response_format` is passed through as before, not refused: the
/// routes that ask for JSON hold their providers to it through the contract
/// gate and the runtime shape check, which is what decides failover to them.
pub(super) fn untranslatable(req: &ChatRequest) -> Option<String> {
    // OpenAI's `metadata` tags a stored completion; the messages API's
    // carries a user id only (which OpenAI's `user` becomes).
    if req.extra.get("metadata").is_some_and(|m| !m.is_null()) {
        return Some("`metadata`: the messages API's metadata holds only a user id (send `user`)".into());
    }
    let conversation: Vec<&Message> = req.messages.iter().filter(|m| !is_system(m)).collect();
    messages(&conversation).err()
}

/// `{"type":"text"}` asks for what every answer is anyway.
fn is_text_format(format: &Value) -> bool {
    format.get("type").and_then(Value::as_str) == Some("text")
}

pub(super) fn is_system(message: &Message) -> bool {
    message.role == "system" || message.role == "developer"
}

/// The top-level fields the translation replaces or drops, set on `body`
/// (which starts as the request's `extra`).
pub(super) fn fields(req: &ChatRequest, body: &mut Map<String, Value>) {
    if body.get("n").is_some_and(|n| n.as_u64().is_none_or(|n| n <= 1)) {
        body.remove("n");
    }
    if body.get("response_format").is_some_and(is_text_format) {
        body.remove("response_format");
    }
    let extra = &req.extra;
    let has_tools = extra.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    let choice = tool_choice(extra.get("tool_choice"), extra.get("parallel_tool_calls"), has_tools);
    let stop = extra.get("stop").and_then(stop_sequences);
    let max_completion = extra.get("max_completion_tokens").cloned();
    let user = extra.get("user").and_then(Value::as_str).map(str::to_owned);
    for field in DROPPED {
        body.remove(field);
    }
    if let Some(tools) = extra.get("tools").and_then(Value::as_array) {
        body.insert("tools".into(), tools.iter().map(tool).collect());
    }
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    if let Some(stop) = stop {
        body.insert("stop_sequences".into(), stop);
    }
    // OpenAI's end-user id is the messages API's `metadata.user_id`.
    if let Some(user) = user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    if req.max_tokens.is_none()
        && let Some(max) = max_completion.filter(Value::is_u64)
    {
        body.insert("max_tokens".into(), max);
    }
}

/// OpenAI's `stop` (a string or a list) as `stop_sequences`.
fn stop_sequences(stop: &Value) -> Option<Value> {
    match stop {
        Value::String(text) => Some(json!([text])),
        Value::Array(list) if !list.is_empty() => Some(stop.clone()),
        _ => None,
    }
}

/// A function tool as an Anthropic tool; anything else (an Anthropic tool
/// already) as it is.
fn tool(tool: &Value) -> Value {
    let Some(function) =
        tool.get("function").filter(|_| tool.get("type").and_then(Value::as_str) == Some("function"))
    else {
        return tool.clone();
    };
    let mut out = Map::new();
    out.insert("name".into(), function.get("name").cloned().unwrap_or(Value::Null));
    if let Some(description) = function.get("description") {
        out.insert("description".into(), description.clone());
    }
    let schema = function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
    out.insert("input_schema".into(), schema);
    Value::Object(out)
}

/// OpenAI's `tool_choice` (and `parallel_tool_calls: false`, which Anthropic
/// says inside the choice) as Anthropic's; `None` when nothing is to be said.
fn tool_choice(choice: Option<&Value>, parallel: Option<&Value>, has_tools: bool) -> Option<Value> {
    let serial = parallel == Some(&Value::Bool(false));
    let mut out = match choice {
        None | Some(Value::Null) if serial && has_tools => json!({"type": "auto"}),
        None | Some(Value::Null) => return None,
        Some(Value::String(mode)) => match mode.as_str() {
            "required" => json!({"type": "any"}),
            other => json!({"type": other}),
        },
        Some(forced) if forced.get("type").and_then(Value::as_str) == Some("function") => {
            json!({"type": "tool", "name": forced.pointer("/function/name")})
        }
        Some(native) => native.clone(),
    };
    if serial
        && out.get("type").and_then(Value::as_str) != Some("none")
        && let Some(object) = out.as_object_mut()
    {
        object.insert("disable_parallel_tool_use".into(), true.into());
    }
    Some(out)
}

/// The conversation (system messages already taken out) as Anthropic
/// messages: tool calls become `tool_use` blocks, tool answers `tool_result`
/// blocks of one user message (Anthropic requires user and assistant turns
/// to alternate), image parts image blocks.
pub(super) fn messages(conversation: &[&Message]) -> Result<Vec<Value>, String> {
    let mut out: Vec<Value> = Vec::new();
    // The last message out is the user message collecting tool results.
    let mut collecting = false;
    for message in conversation {
        let calls = message.extra.get("tool_calls").and_then(Value::as_array).filter(|c| !c.is_empty());
        match (message.role.as_str(), calls) {
            ("tool", _) => {
                let result = tool_result(message)?;
                match out.last_mut().filter(|_| collecting) {
                    Some(last) => push_blocks(last, vec![result]),
                    None => out.push(json!({"role": "user", "content": [result]})),
                }
                collecting = true;
            }
            ("user", _) if collecting => {
                // Text after tool results joins their turn rather than
                // making two user turns in a row.
                let blocks = blocks(&message.content)?;
                if let Some(last) = out.last_mut() {
                    push_blocks(last, blocks);
                }
                collecting = false;
            }
            ("assistant", Some(calls)) => {
                out.push(assistant_calls(message, calls)?);
                collecting = false;
            }
            _ => {
                out.push(plain(message)?);
                collecting = false;
            }
        }
    }
    Ok(out)
}

/// Appends content blocks to a message whose content is a block list.
fn push_blocks(message: &mut Value, blocks: Vec<Value>) {
    if let Some(content) = message.get_mut("content").and_then(Value::as_array_mut) {
        content.extend(blocks);
    }
}

/// A message without tools: its fields as they are, its parts translated.
fn plain(message: &Message) -> Result<Value, String> {
    let mut out = message.extra.clone();
    out.insert("role".into(), message.role.clone().into());
    let content = match &message.content {
        Content::Text(text) => Value::String(text.clone()),
        Content::Parts(parts) => Value::Array(parts.iter().map(part).collect::<Result<_, _>>()?),
        Content::None => Value::Null,
    };
    out.insert("content".into(), content);
    Ok(Value::Object(out))
}

/// Content as a list of blocks; empty text says nothing and is left out
/// (Anthropic rejects empty text blocks).
fn blocks(content: &Content) -> Result<Vec<Value>, String> {
    match content {
        Content::Text(text) if text.is_empty() => Ok(Vec::new()),
        Content::Text(text) => Ok(vec![json!({"type": "text", "text": text})]),
        Content::Parts(parts) => parts
            .iter()
            .filter(|p| {
                !(p.get("type").and_then(Value::as_str) == Some("text") && p.get("text") == Some(&json!("")))
            })
            .map(part)
            .collect(),
        Content::None => Ok(Vec::new()),
    }
}

/// An assistant turn that calls tools: its text, then one `tool_use` each.
fn assistant_calls(message: &Message, calls: &[Value]) -> Result<Value, String> {
    let mut content = blocks(&message.content)?;
    for call in calls {
        content.push(tool_use(call)?);
    }
    let mut out = message.extra.clone();
    out.remove("tool_calls");
    out.insert("role".into(), "assistant".into());
    out.insert("content".into(), Value::Array(content));
    Ok(Value::Object(out))
}

/// An OpenAI tool call as a `tool_use` block; its `arguments` string must
/// be a JSON object, which becomes the block's `input`.
fn tool_use(call: &Value) -> Result<Value, String> {
    let id = call.get("id").and_then(Value::as_str).ok_or("a tool call without an `id`")?;
    let name = call.pointer("/function/name").and_then(Value::as_str).ok_or("a tool call without a name")?;
    let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or_default();
    let input = match arguments.trim() {
        "" => json!({}),
        text => serde_json::from_str::<Value>(text)
            .map_err(|err| format!("tool call `{id}`: its arguments are not JSON ({err})"))?,
    };
    if !input.is_object() {
        return Err(format!("tool call `{id}`: its arguments are not a JSON object"));
    }
    Ok(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
}

/// A `tool` message as a `tool_result` block.
fn tool_result(message: &Message) -> Result<Value, String> {
    let id = message
        .extra
        .get("tool_call_id")
        .and_then(Value::as_str)
        .ok_or("a `tool` message without `tool_call_id`")?;
    let content = match &message.content {
        Content::Parts(parts) => Value::Array(parts.iter().map(part).collect::<Result<_, _>>()?),
        other => Value::String(other.text()),
    };
    Ok(json!({"type": "tool_result", "tool_use_id": id, "content": content}))
}

/// One OpenAI content part as an Anthropic content block. Text parts are
/// already text blocks, and parts of unknown types (Anthropic blocks sent
/// as they are) pass unchanged.
fn part(part: &Value) -> Result<Value, String> {
    match part.get("type").and_then(Value::as_str) {
        Some("image_url") => image(part),
        Some("input_audio") => Err("an `input_audio` content part: the messages API takes no audio".into()),
        Some("file") => {
            Err("a `file` content part: the messages API takes documents, not OpenAI files".into())
        }
        _ => Ok(part.clone()),
    }
}

/// An `image_url` part as an image block: a base64 data URL inline, an
/// http(s) URL by reference.
fn image(part: &Value) -> Result<Value, String> {
    let url =
        part.pointer("/image_url/url").and_then(Value::as_str).ok_or("an `image_url` part without a url")?;
    if let Some(data_url) = url.strip_prefix("data:") {
        let (meta, data) = data_url.split_once(',').ok_or("an image data URL without data")?;
        let media_type = meta.strip_suffix(";base64").ok_or("an image data URL that is not base64")?;
        return Ok(
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
        );
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(json!({"type": "image", "source": {"type": "url", "url": url}}));
    }
    Err("an image URL that is neither a data URL nor http(s)".into())
}
