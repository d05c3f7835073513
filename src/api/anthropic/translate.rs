//! An Anthropic Messages request → a job request: the request as the
//! client sent it (`native`, which an Anthropic provider is sent), and the
//! job's chat view of it (OpenAI chat terms), from which budgets, contract
//! checks and providers of other dialects work: `system` becomes the first
//! message, content blocks become content parts, `tool_use` blocks the
//! assistant's `tool_calls`, `tool_result` blocks `tool` messages, `tools`
//! functions, an `output_config` schema `response_format`. What the chat
//! view cannot hold is named in `native.untranslated` ([`super::fields`]
//! says what is), so a provider of another dialect is passed over for it
//! rather than sent the request without it.

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::fields::{self, Carried};
use crate::api::Problem;
use crate::api::door::{Expected, MODEL, STREAM};
use crate::jobs::{ChatMessage, DoorName, JobRequest, NativeRequest, validate_params};

/// The problems of this door's requests are titled so.
const TITLE: &str = "Invalid Messages request";

/// A Messages request as this door reads it: what the chat view needs by
/// name, every other field kept as sent for the translation's table
/// ([`super::fields`]) to place.
#[derive(Deserialize)]
pub struct MessagesRequest {
    model: String,
    max_tokens: u64,
    stream: Option<bool>,
    system: Option<Value>,
    messages: Vec<Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// The fields this door reads by name, and `temperature`, whose range is
/// Anthropic's (0 to 1), narrower than chat's.
const EXPECTED: [Expected; 5] = [
    MODEL,
    Expected::required("max_tokens", "a positive integer", |n| n.as_u64().is_some_and(|n| n >= 1)),
    STREAM,
    Expected::required("messages", "an array of turns", Value::is_array),
    Expected::optional("temperature", "a number from 0 to 1", |t| {
        t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t))
    }),
];

/// The job's chat view of a Messages request, whether it streams, and
/// what the view leaves out that matters.
pub struct ChatView {
    pub job: JobRequest,
    pub stream: bool,
    pub untranslated: Vec<String>,
}

/// The request body's fields and headers → the job request, and whether
/// it streams.
pub fn to_job(fields: Map<String, Value>, headers: &HeaderMap) -> Result<(JobRequest, bool), Problem> {
    let mut body = fields.clone();
    body.remove("stream");
    let request: MessagesRequest = crate::api::door::typed(fields, TITLE, &EXPECTED)?;
    let ChatView { job, stream, untranslated } = ChatView::try_from(request)?;
    let headers = crate::api::door::carried_headers(headers, fields::CARRIED_HEADERS);
    let native = NativeRequest { body, headers, untranslated };
    Ok((job.through(DoorName::AnthropicMessages, Some(native)), stream))
}

impl TryFrom<MessagesRequest> for ChatView {
    type Error = Problem;

    fn try_from(request: MessagesRequest) -> Result<Self, Problem> {
        let MessagesRequest { model, max_tokens, stream, system, messages: turns, mut rest } = request;
        let mut untranslated: Vec<String> = rest
            .iter()
            .filter(|(name, value)| fields::top_level(name, value) == Carried::Untranslated)
            .map(|(name, _)| format!("`{name}`"))
            .collect();
        let stream = stream == Some(true);
        let mut messages = system_messages(system)?;
        for (index, turn) in turns.into_iter().enumerate() {
            let turn = turn_messages(turn, &mut untranslated)
                .map_err(|err| err.at(&format!("/messages/{index}")))?;
            messages.extend(turn);
        }
        let mut params = Map::new();
        params.insert("max_tokens".into(), max_tokens.into());
        if stream {
            params.insert("stream".into(), true.into());
            // The protocol's stream always reports usage: ask every dialect for it.
            params.insert("stream_options".into(), json!({"include_usage": true}));
        }
        translate_params(&mut rest, &mut params, &mut untranslated)?;
        validate_params(&params).map_err(|mut err| {
            err.path = crate::api::door::client_path(&err.path, &RENAMES);
            Problem::invalid_params(err, TITLE)
        })?;
        untranslated.sort();
        untranslated.dedup();
        Ok(ChatView { job: JobRequest::chat(model, messages, params), stream, untranslated })
    }
}

/// The Messages fields the chat parameters of another name come from.
const RENAMES: [(&str, &str); 4] = [
    ("stop", "stop_sequences"),
    ("user", "metadata/user_id"),
    ("parallel_tool_calls", "tool_choice"),
    ("response_format", "output_config"),
];

/// Sampling, tools, tool choice, the user and an output schema → chat's
/// parameters.
fn translate_params(
    fields: &mut Map<String, Value>,
    params: &mut Map<String, Value>,
    untranslated: &mut Vec<String>,
) -> Result<(), Problem> {
    for (from, to) in
        [("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("stop_sequences", "stop")]
    {
        if let Some(value) = fields.remove(from).filter(|v| !v.is_null()) {
            params.insert(to.into(), value);
        }
    }
    if let Some(user) =
        fields.remove("metadata").and_then(|m| m.get("user_id").cloned()).filter(Value::is_string)
    {
        params.insert("user".into(), user);
    }
    if let Some(tools) = fields.remove("tools") {
        params.insert("tools".into(), tools_of(tools, untranslated)?);
    }
    if let Some(choice) = fields.remove("tool_choice") {
        let (choice, parallel) = tool_choice_of(choice)?;
        params.insert("tool_choice".into(), choice);
        if !parallel {
            params.insert("parallel_tool_calls".into(), false.into());
        }
    }
    if let Some(schema) =
        fields.remove("output_config").and_then(|config| config.pointer("/format/schema").cloned())
    {
        let format = json!({"name": "output", "schema": schema, "strict": true});
        params.insert("response_format".into(), json!({"type": "json_schema", "json_schema": format}));
    }
    Ok(())
}

/// A fault in the request, with the JSON pointer of the field at fault.
pub struct Fault {
    detail: String,
    path: String,
}

impl Fault {
    fn new(detail: impl Into<String>, path: &str) -> Fault {
        Fault { detail: detail.into(), path: path.to_owned() }
    }

    /// The fault under `prefix` (the turn it is in).
    fn at(self, prefix: &str) -> Problem {
        let path = format!("{prefix}{}", self.path);
        Problem::invalid_field(TITLE, format!("{}: {}", path, self.detail), path)
    }
}

fn invalid(detail: impl Into<String>, field: &str) -> Problem {
    Problem::invalid_field(TITLE, detail, format!("/{field}"))
}

/// `system`, a string or text blocks → the leading system message.
fn system_messages(system: Option<Value>) -> Result<Vec<ChatMessage>, Problem> {
    match system {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![ChatMessage::new("system", text)]),
        Some(Value::Array(blocks)) => {
            let texts = block_texts(&blocks).map_err(|index| {
                Fault::new("a system block must be a text block", &format!("/{index}")).at("/system")
            })?;
            let parts: Vec<Value> =
                texts.into_iter().map(|text| json!({"type": "text", "text": text})).collect();
            Ok(vec![ChatMessage::new("system", parts)])
        }
        Some(_) => Err(invalid("`system` must be a string or an array of text blocks", "system")),
    }
}

/// One turn → its chat messages: an assistant turn is one message (its
/// text, its `tool_use` blocks as `tool_calls`); a user turn's
/// `tool_result` blocks become `tool` messages, first, as chat wants them
/// right after the call, then the rest of its content as a user message.
fn turn_messages(turn: Value, untranslated: &mut Vec<String>) -> Result<Vec<ChatMessage>, Fault> {
    let role = turn["role"].as_str().unwrap_or_default().to_owned();
    if role == "system" {
        return system_turn(&turn["content"]);
    }
    if role != "user" && role != "assistant" {
        return Err(Fault::new("`role` must be `user`, `assistant` or `system`", "/role"));
    }
    let blocks = match &turn["content"] {
        Value::String(text) => return Ok(vec![ChatMessage::new(role, text.clone())]),
        Value::Array(blocks) => blocks,
        _ => return Err(Fault::new("`content` must be a string or an array of blocks", "/content")),
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        let at = format!("/content/{index}");
        match (role.as_str(), block["type"].as_str()) {
            (_, Some("text")) => {
                let text =
                    block["text"].as_str().ok_or_else(|| Fault::new("a text block needs `text`", &at))?;
                parts.push(json!({"type": "text", "text": text}));
            }
            ("user", Some("image")) => parts.push(image_part(&block["source"]).ok_or_else(|| {
                Fault::new(
                    "an image block needs a `source` of type `base64` (media_type, data) or `url`",
                    &at,
                )
            })?),
            ("user", Some("tool_result")) => {
                results.push(tool_message(block, untranslated).ok_or_else(|| {
                    Fault::new(
                        "a tool_result block needs `tool_use_id` and `content`: a string or blocks",
                        &at,
                    )
                })?)
            }
            ("assistant", Some("tool_use")) => calls.push(tool_call(block).ok_or_else(|| {
                Fault::new("a tool_use block needs `id`, `name` and an object `input`", &at)
            })?),
            (_, Some(kind)) if fields::block(kind) == Carried::Untranslated => {
                untranslated.push(format!("`{kind}` blocks"));
            }
            (_, kind) => {
                let kind = kind.unwrap_or("(none)");
                return Err(Fault::new(format!("a `{kind}` block is not expected in a {role} turn"), &at));
            }
        }
    }
    if role == "assistant" {
        let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        // A turn of thinking alone still holds its place in the chat view.
        let content = match text.is_empty() && !calls.is_empty() {
            true => Value::Null,
            false => text.into(),
        };
        let message = ChatMessage::new("assistant", content);
        return Ok(vec![match calls.is_empty() {
            true => message,
            false => message.with("tool_calls", calls),
        }]);
    }
    if !parts.is_empty() {
        results.push(ChatMessage::new("user", parts));
    }
    Ok(results)
}

/// A system turn in the conversation (Claude Code's environment notes, sent
/// where they apply rather than in the top-level `system`): a system
/// message in the same place, its text blocks joined.
fn system_turn(content: &Value) -> Result<Vec<ChatMessage>, Fault> {
    let text = match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => block_texts(blocks)
            .map_err(|index| {
                Fault::new("a system turn holds text blocks only", &format!("/content/{index}"))
            })?
            .concat(),
        _ => return Err(Fault::new("`content` must be a string or an array of blocks", "/content")),
    };
    Ok(vec![ChatMessage::new("system", text)])
}

/// The texts of blocks that must all be text blocks, or the index of the
/// first that is not.
fn block_texts(blocks: &[Value]) -> Result<Vec<&str>, usize> {
    blocks
        .iter()
        .enumerate()
        .map(|(index, block)| match (block["type"].as_str(), block["text"].as_str()) {
            (Some("text"), Some(text)) => Ok(text),
            _ => Err(index),
        })
        .collect()
}

fn image_part(source: &Value) -> Option<Value> {
    let url = match source["type"].as_str()? {
        "base64" => format!("data:{};base64,{}", source["media_type"].as_str()?, source["data"].as_str()?),
        "url" => source["url"].as_str()?.to_owned(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

fn tool_call(block: &Value) -> Option<Value> {
    let (id, name) = (block["id"].as_str()?, block["name"].as_str()?);
    let input = block.get("input").filter(|input| input.is_object())?;
    Some(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}))
}

/// A `tool_result` block → a `tool` message: its text. A result that also
/// holds other blocks (a screenshot a tool returned) keeps its text in the
/// chat view and is named in `untranslated`: a tool message carries text.
fn tool_message(block: &Value, untranslated: &mut Vec<String>) -> Option<ChatMessage> {
    let id = block["tool_use_id"].as_str()?;
    let content = match block.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => {
            if blocks.iter().any(|b| b["type"] != "text") {
                untranslated.push("`tool_result` blocks holding more than text".into());
            }
            blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect()
        }
        Some(_) => return None,
    };
    let content = if block["is_error"] == true { format!("Error: {content}") } else { content };
    Some(ChatMessage::new("tool", content).with("tool_call_id", id))
}

fn tools_of(tools: Value, untranslated: &mut Vec<String>) -> Result<Value, Problem> {
    let Value::Array(tools) = tools else {
        return Err(invalid("`tools` must be an array", "tools"));
    };
    let mut functions = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        if fields::tool(tool) == Carried::Untranslated {
            untranslated.push(format!("the server tool `{}`", tool["type"].as_str().unwrap_or_default()));
            continue;
        }
        let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("input_schema")) else {
            return Err(invalid(
                format!("tool {index} needs `name` and `input_schema`"),
                &format!("tools/{index}"),
            ));
        };
        let mut function = json!({"name": name, "parameters": schema});
        if let Some(description) = tool.get("description").filter(|d| d.is_string()) {
            function["description"] = description.clone();
        }
        functions.push(json!({"type": "function", "function": function}));
    }
    Ok(functions.into())
}

/// `tool_choice` → chat's, and whether parallel tool calls stay allowed.
fn tool_choice_of(choice: Value) -> Result<(Value, bool), Problem> {
    let parallel = choice["disable_parallel_tool_use"] != true;
    let chat = match (choice["type"].as_str(), choice["name"].as_str()) {
        (Some("auto"), _) => json!("auto"),
        (Some("any"), _) => json!("required"),
        (Some("none"), _) => json!("none"),
        (Some("tool"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
        _ => {
            return Err(invalid(
                "`tool_choice` must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\"}",
                "tool_choice",
            ));
        }
    };
    Ok((chat, parallel))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(body: Value) -> Result<(Value, bool), Problem> {
        let Value::Object(fields) = body else { unreachable!() };
        let (job, stream) = to_job(fields, &HeaderMap::new())?;
        Ok((serde_json::to_value(job).unwrap_or_default(), stream))
    }

    #[test]
    fn a_tool_round_trip_becomes_chat_messages_in_order() {
        let (job, stream) = job(json!({"model": "chat", "max_tokens": 64, "system": "Be brief.",
            "stream": true,
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Utrecht"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                                             {"type": "text", "text": "And tomorrow?"}]}]}))
        .ok()
        .unwrap_or_default();
        assert!(stream);
        let messages = job["input"]["messages"].as_array().cloned().unwrap_or_default();
        let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(messages[2]["tool_calls"][0]["function"]["arguments"], r#"{"city":"Utrecht"}"#);
        assert_eq!(messages[3], json!({"role": "tool", "tool_call_id": "t1", "content": "sunny"}));
        assert_eq!(job["params"]["tool_choice"]["function"]["name"], "get_weather");
        assert_eq!(job["params"]["parallel_tool_calls"], false);
        assert_eq!(job["params"]["stream"], true);
        assert_eq!(job["door"], "anthropic-messages");
    }

    #[test]
    fn what_the_chat_view_cannot_hold_is_kept_and_named() {
        let body = json!({"model": "chat", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "context_management": {"edits": []},
            "tools": [{"type": "web_search_20250305", "name": "web_search"}, {"name": "f", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s1"},
                                                  {"type": "text", "text": "hello"}]},
                {"role": "user", "content": [{"type": "document", "source": {}}, {"type": "text", "text": "and?"}]}]});
        let (job, _) = job(body.clone()).ok().unwrap_or_default();
        let mut sent = body;
        assert_eq!(job["native"]["body"], sent.take(), "the client's request is kept whole");
        assert_eq!(
            job["native"]["untranslated"],
            json!([
                "`document` blocks",
                "`thinking`",
                "`thinking` blocks",
                "the server tool `web_search_20250305`"
            ])
        );
        assert_eq!(job["params"]["tools"].as_array().map(Vec::len), Some(1), "the client tool is translated");
        assert_eq!(job["input"]["messages"][1]["content"], "hello");
    }

    #[test]
    fn a_tool_result_with_an_image_keeps_its_text_and_is_named() {
        let (job, _) = job(json!({"model": "chat", "max_tokens": 8, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "the screen"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]}]}))
        .ok()
        .unwrap_or_default();
        assert_eq!(job["input"]["messages"][1]["content"], "the screen");
        assert_eq!(job["native"]["untranslated"], json!(["`tool_result` blocks holding more than text"]));
    }

    #[test]
    fn an_output_schema_becomes_a_response_format() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let (job, _) =
            job(json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
            "output_config": {"format": {"type": "json_schema", "schema": schema}}}))
            .ok()
            .unwrap_or_default();
        assert_eq!(job["params"]["response_format"]["json_schema"]["schema"], schema);
        assert_eq!(job["native"]["untranslated"], json!([]));
    }

    #[test]
    fn a_parameter_is_refused_under_the_name_the_client_sent() {
        for (field, value, path) in [
            ("temperature", json!("hot"), "/temperature"),
            ("temperature", json!(1.5), "/temperature"),
            ("stop_sequences", json!(5), "/stop_sequences"),
            ("max_tokens", json!(0), "/max_tokens"),
        ] {
            let mut body =
                json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]});
            body[field] = value;
            let problem = job(body).err().map(|p| format!("{p:?}")).unwrap_or_default();
            assert!(problem.contains(&format!("String(\"{path}\")")), "{field}: {problem}");
        }
    }

    #[test]
    fn what_the_door_cannot_read_is_refused_by_name() {
        for (body, path) in [
            (json!({"model": "chat", "messages": []}), "/max_tokens"),
            (
                json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "/messages/0/content/0",
            ),
        ] {
            let problem = job(body).err().map(|p| format!("{p:?}")).unwrap_or_default();
            assert!(problem.contains(path), "{problem}");
        }
    }
}
