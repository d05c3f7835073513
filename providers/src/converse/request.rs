//! An OpenAI-shaped request translated into Bedrock's `Converse` request,
//! so a conversation (tools, tool results, images) can fail over to a
//! Bedrock model that is not Claude — Llama, Mistral, Amazon Nova… — and
//! back.
//!
//! | OpenAI | Converse |
//! |---|---|
//! | `system` / `developer` messages | `system[].text` |
//! | `user` / `assistant` messages | `messages[]` of role `user` / `assistant`, `content[].text` (consecutive turns of one role merged) |
//! | an assistant's `tool_calls` | `toolUse` blocks (`input` the parsed `arguments`) |
//! | `tool` messages | `toolResult` blocks of a `user` turn |
//! | `image_url` parts (data URLs) | `image` blocks |
//! | `tools`, `tool_choice` (`auto`, `required`, a function) | `toolConfig.tools[].toolSpec`, `toolConfig.toolChoice` (`auto`, `any`, `tool`) |
//! | `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`, `stop` | `inferenceConfig` (`maxTokens`, `temperature`, `topP`, `stopSequences`) |
//! | `response_format` `json_schema` / `json_object` (without `tools`) | one tool, [`JSON_ANSWER`], whose input schema is the schema, forced: its input is the answer (see [`asks_json`]) |
//!
//! What has no translation refuses to build a body, with the reason
//! ([`refused`]): several choices, log probabilities, logit biases, a
//! seed, penalties, a response format beside tools (Converse has no JSON
//! mode, and the forced tool that says JSON would take the tools' place),
//! a reasoning effort, request metadata, audio, predicted outputs, web
//! search, the legacy `functions`, `tool_choice: "none"`. Fields neither
//! translated nor refused pass through at the top level (Converse's own:
//! `additionalModelRequestFields`, `guardrailConfig`…).

use serde_json::{Map, Value, json};

use crate::types::{ChatRequest, Content, Message, TRANSLATED_OR_HINTS};

/// Converse's own translations and refusals beside [`TRANSLATED_OR_HINTS`]
/// (a refused field is left out where it is unset, `false` or empty):
/// never passed through.
const DROPPED: [&str; 11] = [
    "stop",
    "logprobs",
    "response_format",
    "modalities",
    "audio",
    "top_logprobs",
    "logit_bias",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "metadata",
];

/// The tool a JSON answer is asked for with: Converse has no JSON mode,
/// but a forced tool's input is JSON valid against its schema.
pub(crate) const JSON_ANSWER: &str = "json_answer";

/// Whether `req` asks for a JSON answer (`response_format` `json_object`
/// or `json_schema`): Converse is then asked to call [`JSON_ANSWER`], and
/// its input is the answer's text.
pub(crate) fn asks_json(req: &ChatRequest) -> bool {
    let format = req.extra.get("response_format").and_then(|f| f.get("type")).and_then(Value::as_str);
    matches!(format, Some("json_object" | "json_schema"))
}

/// The request as Converse's body (the model is in the URL, and streaming
/// is the operation: neither is in the body); why not, when it cannot be.
pub(crate) fn request_body(req: &ChatRequest) -> Result<Value, String> {
    refused(req)?;
    let mut body: Map<String, Value> = req
        .extra
        .iter()
        .filter(|(field, _)| {
            !TRANSLATED_OR_HINTS.contains(&field.as_str()) && !DROPPED.contains(&field.as_str())
        })
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect();
    let (system, conversation): (Vec<&Message>, Vec<&Message>) =
        req.messages.iter().partition(|m| m.role == "system" || m.role == "developer");
    let system: Vec<Value> = system
        .iter()
        .map(|m| m.content.text())
        .filter(|text| !text.is_empty())
        .map(|text| json!({"text": text}))
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages(&conversation)?));
    if let Some(config) = tool_config(req)? {
        body.insert("toolConfig".into(), config);
    }
    let inference = inference_config(req);
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    Ok(Value::Object(body))
}

/// What an OpenAI request may ask that Converse cannot carry.
fn refused(req: &ChatRequest) -> Result<(), String> {
    let extra = &req.extra;
    let set = |field: &str| extra.get(field).is_some_and(|v| !v.is_null() && *v != Value::Bool(false));
    if extra.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err("`n`: Converse answers with one choice".into());
    }
    let format = extra.get("response_format").and_then(|f| f.get("type")).and_then(Value::as_str);
    if format.is_some_and(|kind| !matches!(kind, "text" | "json_object" | "json_schema")) {
        return Err("`response_format`: only text, json_object and json_schema translate".into());
    }
    let has_tools = extra.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    if asks_json(req) && has_tools {
        return Err("`response_format` beside `tools`: Converse has no JSON mode, and the forced tool that \
                    says JSON would take the tools' place"
            .into());
    }
    if extra.get("logit_bias").and_then(Value::as_object).is_some_and(|bias| !bias.is_empty()) {
        return Err("`logit_bias`: Converse has no logit bias".into());
    }
    if extra.get("modalities").is_some_and(|m| !m.is_null() && *m != json!(["text"])) || set("audio") {
        return Err("`modalities`: only text answers are translated".into());
    }
    for (field, why) in [
        ("logprobs", "Converse returns no log probabilities"),
        ("top_logprobs", "Converse returns no log probabilities"),
        ("seed", "Converse takes no seed"),
        ("presence_penalty", "Converse has no penalties"),
        ("frequency_penalty", "Converse has no penalties"),
        ("reasoning_effort", "a model's reasoning settings are its own additionalModelRequestFields"),
        ("metadata", "Converse's requestMetadata is not translated"),
        ("prediction", "Converse has no predicted outputs"),
        ("web_search_options", "Converse has no web search"),
        ("functions", "the legacy `functions` are not translated; send `tools`"),
        ("function_call", "the legacy `function_call` is not translated; send `tool_choice`"),
    ] {
        if set(field) {
            return Err(format!("`{field}`: {why}"));
        }
    }
    let has_tools = extra.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    if has_tools && extra.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        return Err("`parallel_tool_calls`: Converse cannot be told to call one tool at a time".into());
    }
    Ok(())
}

/// The conversation as Converse's turns, consecutive turns of one role
/// merged (Converse wants them alternating).
fn messages(conversation: &[&Message]) -> Result<Vec<Value>, String> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in conversation {
        let (role, blocks) = match message.role.as_str() {
            "user" => ("user", content_blocks(&message.content)?),
            "assistant" => ("assistant", assistant_blocks(message)?),
            "tool" => ("user", vec![tool_result(message)?]),
            other => return Err(format!("a `{other}` message: Converse has user and assistant turns only")),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    Ok(turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect())
}

/// A message's text and image parts as content blocks.
fn content_blocks(content: &Content) -> Result<Vec<Value>, String> {
    match content {
        Content::None => Ok(Vec::new()),
        Content::Text(text) if text.is_empty() => Ok(Vec::new()),
        Content::Text(text) => Ok(vec![json!({"text": text})]),
        Content::Parts(parts) => parts.iter().map(part).collect(),
    }
}

fn part(part: &Value) -> Result<Value, String> {
    match part.get("type").and_then(Value::as_str).unwrap_or_default() {
        "text" => Ok(json!({"text": part.get("text").and_then(Value::as_str).unwrap_or_default()})),
        "image_url" => {
            let url = part.pointer("/image_url/url").and_then(Value::as_str).unwrap_or_default();
            image(url).ok_or_else(|| {
                "an `image_url` part: only data URLs of png, jpeg, gif or webp translate".into()
            })
        }
        kind => Err(format!("a `{kind}` content part: not translated for Converse")),
    }
}

/// `data:image/png;base64,…` as an `image` block.
fn image(url: &str) -> Option<Value> {
    let (header, data) = url.strip_prefix("data:image/")?.split_once(";base64,")?;
    let format = if header == "jpg" { "jpeg" } else { header };
    ["png", "jpeg", "gif", "webp"]
        .contains(&format)
        .then(|| json!({"image": {"format": format, "source": {"bytes": data}}}))
}

/// An assistant turn: its text, then its tool calls as `toolUse` blocks.
fn assistant_blocks(message: &Message) -> Result<Vec<Value>, String> {
    let mut blocks = content_blocks(&message.content)?;
    let calls =
        message.extra.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for call in calls {
        let id = call.get("id").and_then(Value::as_str);
        let name = call.pointer("/function/name").and_then(Value::as_str);
        let (Some(id), Some(name)) = (id, name) else {
            return Err("a tool call without an `id` or a function name".into());
        };
        let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
        let input: Value = serde_json::from_str(if arguments.trim().is_empty() { "{}" } else { arguments })
            .map_err(|err| format!("tool call `{id}`: its arguments are not JSON ({err})"))?;
        blocks.push(json!({"toolUse": {"toolUseId": id, "name": name, "input": input}}));
    }
    Ok(blocks)
}

/// A `tool` message as the `toolResult` block that answers its call.
fn tool_result(message: &Message) -> Result<Value, String> {
    let id = message.extra.get("tool_call_id").and_then(Value::as_str);
    let id = id.ok_or("a `tool` message without `tool_call_id`")?;
    Ok(json!({"toolResult": {"toolUseId": id, "content": [{"text": message.content.text()}]}}))
}

/// `tools` and `tool_choice` as `toolConfig`.
fn tool_config(req: &ChatRequest) -> Result<Option<Value>, String> {
    if asks_json(req) {
        let schema = req.extra.get("response_format").and_then(|f| f.pointer("/json_schema/schema")).cloned();
        let schema = schema.unwrap_or_else(|| json!({"type": "object"}));
        return Ok(Some(json!({
            "tools": [{"toolSpec": {"name": JSON_ANSWER, "description": "Answer with this tool's input.",
                "inputSchema": {"json": schema}}}],
            "toolChoice": {"tool": {"name": JSON_ANSWER}},
        })));
    }
    let tools = req.extra.get("tools").and_then(Value::as_array).filter(|tools| !tools.is_empty());
    let Some(tools) = tools else { return Ok(None) };
    let specs = tools.iter().map(tool_spec).collect::<Result<Vec<_>, _>>()?;
    let mut config = json!({"tools": specs});
    let choice = match req.extra.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(choice)) if choice == "auto" => Some(json!({"auto": {}})),
        Some(Value::String(choice)) if choice == "required" => Some(json!({"any": {}})),
        Some(choice) => match choice.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => Some(json!({"tool": {"name": name}})),
            None => return Err(format!("`tool_choice` {choice}: Converse's tool choices cannot say it")),
        },
    };
    if let (Some(choice), Some(object)) = (choice, config.as_object_mut()) {
        object.insert("toolChoice".into(), choice);
    }
    Ok(Some(config))
}

fn tool_spec(tool: &Value) -> Result<Value, String> {
    let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
    let function = tool.get("function").filter(|_| kind == "function");
    let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) else {
        return Err(format!("a tool of type `{kind}`: only function tools have a Converse toolSpec"));
    };
    let schema = function
        .and_then(|f| f.get("parameters"))
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let mut spec = json!({"name": name, "inputSchema": {"json": schema}});
    if let (Some(description), Some(object)) =
        (function.and_then(|f| f.get("description")).filter(|d| d.is_string()), spec.as_object_mut())
    {
        object.insert("description".into(), description.clone());
    }
    Ok(json!({"toolSpec": spec}))
}

/// `inferenceConfig`: the completion limit, temperature, top-p and stops.
fn inference_config(req: &ChatRequest) -> Map<String, Value> {
    let mut config = Map::new();
    let max = req
        .max_tokens
        .map(Value::from)
        .or_else(|| req.extra.get("max_completion_tokens").filter(|v| v.is_u64()).cloned());
    if let Some(max) = max {
        config.insert("maxTokens".into(), max);
    }
    if let Some(temperature) = req.temperature {
        config.insert("temperature".into(), temperature.into());
    }
    if let Some(top_p) = req.extra.get("top_p").filter(|v| v.is_number()) {
        config.insert("topP".into(), top_p.clone());
    }
    match req.extra.get("stop") {
        Some(Value::String(stop)) => {
            config.insert("stopSequences".into(), json!([stop]));
        }
        Some(Value::Array(stops)) if !stops.is_empty() => {
            config.insert("stopSequences".into(), Value::Array(stops.clone()));
        }
        _ => {}
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap_or_default()
    }

    #[test]
    fn a_tool_conversation_becomes_alternating_turns() {
        let body = request_body(&request(json!({
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12 °C"},
                {"role": "user", "content": "And tomorrow?"}],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather now",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": "required", "max_tokens": 100, "temperature": 0.2, "stop": "END",
            "user": "u-1", "additionalModelRequestFields": {"top_k": 5}})));
        assert_eq!(
            body,
            Ok(json!({
                "system": [{"text": "Be brief."}],
                "messages": [
                    {"role": "user", "content": [{"text": "Weather in Oslo?"}]},
                    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "call_1", "name": "weather",
                        "input": {"city": "Oslo"}}}]},
                    {"role": "user", "content": [
                        {"toolResult": {"toolUseId": "call_1", "content": [{"text": "12 °C"}]}},
                        {"text": "And tomorrow?"}]}],
                "toolConfig": {"tools": [{"toolSpec": {"name": "weather", "description": "Weather now",
                    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}}],
                    "toolChoice": {"any": {}}},
                "inferenceConfig": {"maxTokens": 100, "temperature": 0.2, "stopSequences": ["END"]},
                "additionalModelRequestFields": {"top_k": 5}}))
        );
    }

    #[test]
    fn what_converse_cannot_say_is_refused_with_the_reason() {
        let messages = json!([{"role": "user", "content": "hi"}]);
        for (field, value) in [
            ("n", json!(2)),
            ("response_format", json!({"type": "json_object"})),
            ("response_format", json!({"type": "grammar"})),
            ("seed", json!(7)),
            ("logprobs", json!(true)),
            ("tool_choice", json!("none")),
        ] {
            let mut body =
                json!({"messages": messages, "tools": [{"type": "function", "function": {"name": "f"}}]});
            body[field] = value;
            let refused = request_body(&request(body));
            assert!(
                refused.as_ref().is_err_and(|why| why.contains(field) || why.contains("none")),
                "{field}: {refused:?}"
            );
        }
        let json_schema = json!({"messages": messages, "response_format": {"type": "json_schema",
            "json_schema": {"name": "person", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}});
        assert_eq!(
            request_body(&request(json_schema)).map(|body| body["toolConfig"].clone()),
            Ok(
                json!({"tools": [{"toolSpec": {"name": JSON_ANSWER, "description": "Answer with this tool's input.",
                "inputSchema": {"json": {"type": "object", "properties": {"name": {"type": "string"}}}}}}],
                "toolChoice": {"tool": {"name": JSON_ANSWER}}})
            )
        );
        let image = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}]}]});
        assert_eq!(
            request_body(&request(image)).map(|body| body["messages"][0]["content"][0].clone()),
            Ok(json!({"image": {"format": "png", "source": {"bytes": "iVBOR"}}}))
        );
        let remote = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]});
        assert!(request_body(&request(remote)).is_err());
    }
}
