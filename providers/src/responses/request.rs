//! The job's chat view said in the Responses API's terms, for a request
//! that did not come through the Responses door: system messages become
//! `developer` input messages, the conversation input items (tool calls
//! `function_call` items, tool answers `function_call_output` items),
//! function tools flat, `response_format` `text.format`, `max_tokens`
//! `max_output_tokens`. Nothing is stored upstream (`store: false`): the
//! gateway keeps the conversation. What the Responses API has no field for
//! (`stop`, `n` > 1, penalties, a seed, log probabilities) is not
//! expressible: the provider is passed over with the reason, never sent
//! the request without it.

use serde_json::{Map, Value, json};

use crate::types::{ChatRequest, Content, Message};

/// Chat fields the Responses API has no place for, and why they matter.
const INEXPRESSIBLE: &[(&str, &str)] = &[
    ("stop", "the Responses API has no stop sequences"),
    ("logprobs", "the Responses API's log probabilities are not translated"),
    ("top_logprobs", "the Responses API's log probabilities are not translated"),
    ("presence_penalty", "the Responses API has no presence penalty"),
    ("frequency_penalty", "the Responses API has no frequency penalty"),
    ("logit_bias", "the Responses API has no logit bias"),
    ("seed", "the Responses API has no seed"),
    ("audio", "audio output is not translated to the Responses API"),
    ("modalities", "audio output is not translated to the Responses API"),
];

/// Chat fields this translation replaces by their Responses form.
const REPLACED: &[&str] = &[
    "tools",
    "tool_choice",
    "response_format",
    "max_completion_tokens",
    "stream_options",
    "reasoning_effort",
    "verbosity",
    "n",
    "store",
];

/// Why `req` cannot be said in the Responses API, if it cannot.
pub(crate) fn cannot_express(req: &ChatRequest) -> Option<String> {
    if req.extra.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Some("`n` > 1: the Responses API answers one output".into());
    }
    for (field, why) in INEXPRESSIBLE {
        if req.extra.get(*field).is_some_and(|v| !v.is_null() && *v != Value::Bool(false)) {
            return Some(format!("`{field}`: {why}"));
        }
    }
    input(&req.messages).err()
}

/// The Responses body for the chat view `req`; an error for what has no
/// translation (see [`cannot_express`]).
pub(crate) fn request_body(req: &ChatRequest, model: &str, stream: bool) -> Result<Value, String> {
    if let Some(reason) = cannot_express(req) {
        return Err(reason);
    }
    let mut body: Map<String, Value> = req.extra.clone();
    for field in REPLACED {
        body.remove(*field);
    }
    body.insert("model".into(), model.into());
    body.insert("input".into(), Value::Array(input(&req.messages)?));
    body.insert("store".into(), false.into());
    let extra = &req.extra;
    let limit = req.max_tokens.map(Value::from).or_else(|| extra.get("max_completion_tokens").cloned());
    if let Some(limit) = limit.filter(|l| !l.is_null()) {
        body.insert("max_output_tokens".into(), limit);
    }
    if let Some(temperature) = req.temperature {
        body.insert("temperature".into(), temperature.into());
    }
    if let Some(tools) = extra.get("tools").and_then(Value::as_array) {
        body.insert("tools".into(), tools.iter().map(tool).collect());
    }
    if let Some(choice) = extra.get("tool_choice").filter(|c| !c.is_null()) {
        body.insert("tool_choice".into(), tool_choice(choice));
    }
    let mut text = Map::new();
    if let Some(format) = extra.get("response_format").and_then(text_format) {
        text.insert("format".into(), format);
    }
    if let Some(verbosity) = extra.get("verbosity").filter(|v| v.is_string()) {
        text.insert("verbosity".into(), verbosity.clone());
    }
    if !text.is_empty() {
        body.insert("text".into(), Value::Object(text));
    }
    if let Some(effort) = extra.get("reasoning_effort").filter(|e| e.is_string()) {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Ok(Value::Object(body))
}

/// A message's fields besides its role and content that input items hold.
const MESSAGE_FIELDS: &[&str] = &["tool_calls", "tool_call_id"];

/// The conversation as input items.
fn input(messages: &[Message]) -> Result<Vec<Value>, String> {
    let mut items = Vec::with_capacity(messages.len());
    for message in messages {
        if let Some(field) = message.extra.keys().find(|key| !MESSAGE_FIELDS.contains(&key.as_str())) {
            return Err(format!("a message's `{field}`: the Responses API's input items have no such field"));
        }
        match message.role.as_str() {
            "tool" => {
                let call_id = message.extra.get("tool_call_id").and_then(Value::as_str);
                let call_id = call_id.ok_or("a tool message without `tool_call_id`")?;
                items.push(json!({"type": "function_call_output", "call_id": call_id,
                    "output": message.content.text()}));
            }
            "assistant" => {
                let text = message.content.text();
                if !text.is_empty() {
                    items.push(json!({"role": "assistant", "content": text}));
                }
                let calls = message.extra.get("tool_calls").and_then(Value::as_array).into_iter().flatten();
                for call in calls {
                    items.push(function_call(call)?);
                }
            }
            role => {
                let role = if role == "system" { "developer" } else { role };
                items.push(json!({"role": role, "content": content(&message.content)?}));
            }
        }
    }
    Ok(items)
}

fn function_call(call: &Value) -> Result<Value, String> {
    let id = call.get("id").and_then(Value::as_str).ok_or("a tool call without an `id`")?;
    let name = call.pointer("/function/name").and_then(Value::as_str).ok_or("a tool call without a name")?;
    let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
    Ok(json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments}))
}

/// A message's content as input content: text as it is, parts as
/// `input_text` and `input_image`.
fn content(content: &Content) -> Result<Value, String> {
    let parts = match content {
        Content::Text(text) => return Ok(text.clone().into()),
        Content::None => return Ok("".into()),
        Content::Parts(parts) => parts,
    };
    parts
        .iter()
        .map(|part| match part.get("type").and_then(Value::as_str) {
            Some("text") => Ok(json!({"type": "input_text", "text": part["text"]})),
            Some("image_url") => {
                let url =
                    part.pointer("/image_url/url").and_then(Value::as_str).ok_or("an image without a url")?;
                Ok(json!({"type": "input_image", "image_url": url}))
            }
            other => Err(format!("a `{}` content part has no Responses translation", other.unwrap_or("?"))),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// A chat function tool, flat as the Responses API has it; another tool as it is.
fn tool(tool: &Value) -> Value {
    let Some(function) = tool.get("function").filter(|_| tool["type"] == "function") else {
        return tool.clone();
    };
    let mut out = Map::new();
    out.insert("type".into(), "function".into());
    for field in ["name", "description", "parameters", "strict"] {
        if let Some(value) = function.get(field) {
            out.insert(field.into(), value.clone());
        }
    }
    Value::Object(out)
}

/// A forced function as the Responses API names it; a mode as it is.
fn tool_choice(choice: &Value) -> Value {
    match choice.pointer("/function/name") {
        Some(name) => json!({"type": "function", "name": name}),
        None => choice.clone(),
    }
}

/// `response_format` as `text.format`; `None` for plain text.
fn text_format(format: &Value) -> Option<Value> {
    match format.get("type").and_then(Value::as_str)? {
        "json_schema" => {
            let schema = &format["json_schema"];
            let mut out = json!({"type": "json_schema", "name": schema.get("name").cloned().unwrap_or("response".into()),
                "schema": schema["schema"]});
            if let Some(strict) = schema.get("strict").filter(|s| s.is_boolean()) {
                out["strict"] = strict.clone();
            }
            Some(out)
        }
        "json_object" => Some(json!({"type": "json_object"})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_round_trip_becomes_input_items() -> Result<(), String> {
        let mut req = ChatRequest::new(vec![
            Message::system("Be brief."),
            Message::user("Weather?"),
            Message {
                role: "assistant".into(),
                content: Content::None,
                extra: json!({"tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "w", "arguments": "{}"}}]})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            },
            Message {
                role: "tool".into(),
                content: Content::Text("sunny".into()),
                extra: json!({"tool_call_id": "c1"}).as_object().cloned().unwrap_or_default(),
            },
        ]);
        req.max_tokens = Some(50);
        req.extra.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "w", "parameters": {}}}]),
        );
        req.extra.insert("tool_choice".into(), json!({"type": "function", "function": {"name": "w"}}));
        req.extra.insert("stream_options".into(), json!({"include_usage": true}));
        let body = request_body(&req, "gpt-x", true)?;
        assert_eq!(body["input"][0], json!({"role": "developer", "content": "Be brief."}));
        assert_eq!(body["input"][2]["type"], "function_call");
        assert_eq!(
            body["input"][3],
            json!({"type": "function_call_output", "call_id": "c1", "output": "sunny"})
        );
        assert_eq!(body["tools"][0], json!({"type": "function", "name": "w", "parameters": {}}));
        assert_eq!(body["tool_choice"], json!({"type": "function", "name": "w"}));
        assert_eq!((body["max_output_tokens"].clone(), body["store"].clone()), (json!(50), json!(false)));
        assert!(body.get("stream_options").is_none() && body["stream"] == true);
        Ok(())
    }

    #[test]
    fn what_the_responses_api_cannot_say_is_named() {
        let mut req = ChatRequest::new(vec![Message::user("x")]);
        req.extra.insert("stop".into(), json!(["\n"]));
        assert!(cannot_express(&req).is_some_and(|why| why.contains("`stop`")));
        assert!(request_body(&req, "m", false).is_err(), "never sent with it dropped");
    }
}
