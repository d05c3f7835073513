//! The door check on a job's `messages`: OpenAI's chat schema, refused with
//! the JSON path of the first thing wrong.
//!
//! Why at the door: a job is stored under its idempotency key before it is
//! driven, so a message no provider can be sent (`"content": 42`) accepted
//! here would be a job that exists, is bound to its key, and can never run.
//! Everything this accepts deserializes into the providers' `ChatRequest`
//! (the test at the end of `crate::engine::request` holds it to that).
//!
//! Unknown keys on a message or part pass through (vendors add their own);
//! the keys OpenAI defines are type-checked. `null` on an optional key reads
//! as absent, since SDKs serialise their unset fields that way (a Python
//! `message.model_dump()` sent back carries `"tool_calls": null`).

use serde_json::{Map, Value};

/// Why `messages` was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` {reason}")]
pub struct InvalidMessage {
    /// A JSON pointer (RFC 6901) relative to the `messages` array itself
    /// (`/2/content/0/type`; empty for the array); [`InvalidMessage::under`]
    /// prefixes it with where the array sits in a request body.
    pub path: String,
    /// What is wrong there, for people.
    pub reason: String,
}

impl InvalidMessage {
    fn at(path: &str, reason: impl Into<String>) -> Self {
        InvalidMessage { path: path.to_owned(), reason: reason.into() }
    }

    /// The same refusal with `prefix` (the pointer of the `messages` array
    /// in the body the caller sent, e.g. `/input/messages`) before its path,
    /// so the path reads against the body as it was sent.
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = format!("{prefix}{}", self.path);
        self
    }
}

type Checked = Result<(), InvalidMessage>;

/// The roles OpenAI's chat schema knows (`function` is deprecated and not
/// accepted: no route of ours can answer it).
const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// Content part types each role may carry.
const TEXT_PARTS: &[&str] = &["text"];
const USER_PARTS: &[&str] = &["text", "image_url", "input_audio", "file"];
const ASSISTANT_PARTS: &[&str] = &["text", "refusal"];

/// Checks `messages` against OpenAI's chat schema.
pub fn validate_messages(messages: &Value) -> Checked {
    let Value::Array(items) = messages else {
        return Err(InvalidMessage::at(
            "",
            format!("must be an array of messages, not {}", json_kind(messages)),
        ));
    };
    if items.is_empty() {
        return Err(InvalidMessage::at("", "must hold at least one message"));
    }
    items.iter().enumerate().try_for_each(|(index, message)| validate_message(message, &format!("/{index}")))
}

fn validate_message(message: &Value, path: &str) -> Checked {
    let fields = as_object(message, path, "a message")?;
    let role = required_str(fields, "role", path)?;
    optional_str(fields, "name", path)?;
    match role {
        "system" | "developer" => required_content(fields, path, TEXT_PARTS, false),
        "user" => required_content(fields, path, USER_PARTS, true),
        "assistant" => validate_assistant(fields, path),
        "tool" => {
            required_str(fields, "tool_call_id", path)?;
            required_content(fields, path, TEXT_PARTS, false)
        }
        other => Err(InvalidMessage::at(
            &format!("{path}/role"),
            format!("`{other}` is not a role; expected one of {}", ROLES.join(", ")),
        )),
    }
}

/// An assistant message may leave `content` out (or `null`) only when it
/// says something else: tool calls, a legacy `function_call`, a refusal.
fn validate_assistant(fields: &Map<String, Value>, path: &str) -> Checked {
    let has_tool_calls = validate_tool_calls(fields, path)?;
    let has_function_call = match present(fields, "function_call") {
        Some(call) => validate_function(call, &format!("{path}/function_call")).map(|()| true)?,
        None => false,
    };
    let has_refusal = optional_str(fields, "refusal", path)?.is_some();
    match present(fields, "content") {
        Some(content) => validate_content(content, &format!("{path}/content"), ASSISTANT_PARTS, false),
        None if has_tool_calls || has_function_call || has_refusal => Ok(()),
        None => Err(InvalidMessage::at(
            &format!("{path}/content"),
            "is required on an assistant message without `tool_calls`, `function_call` or `refusal`",
        )),
    }
}

/// Checks `tool_calls` when present; whether there is at least one.
fn validate_tool_calls(fields: &Map<String, Value>, path: &str) -> Result<bool, InvalidMessage> {
    let Some(calls) = present(fields, "tool_calls") else { return Ok(false) };
    let path = format!("{path}/tool_calls");
    let Value::Array(calls) = calls else {
        return Err(InvalidMessage::at(
            &path,
            format!("must be an array of tool calls, not {}", json_kind(calls)),
        ));
    };
    if calls.is_empty() {
        return Err(InvalidMessage::at(&path, "must hold at least one tool call when present"));
    }
    calls
        .iter()
        .enumerate()
        .try_for_each(|(index, call)| validate_tool_call(call, &format!("{path}/{index}")))?;
    Ok(true)
}

fn validate_tool_call(call: &Value, path: &str) -> Checked {
    let fields = as_object(call, path, "a tool call")?;
    required_str(fields, "id", path)?;
    one_of(fields, "type", path, &["function"])?;
    let function = fields
        .get("function")
        .ok_or_else(|| InvalidMessage::at(&format!("{path}/function"), "is required"))?;
    validate_function(function, &format!("{path}/function"))
}

/// `{name, arguments}`: a tool call's function, or the legacy `function_call`.
fn validate_function(function: &Value, path: &str) -> Checked {
    let fields = as_object(function, path, "a function call")?;
    required_str(fields, "name", path)?;
    required_str(fields, "arguments", path).map(drop)
}

fn required_content(fields: &Map<String, Value>, path: &str, allowed: &[&str], non_empty: bool) -> Checked {
    let path = format!("{path}/content");
    match present(fields, "content") {
        Some(content) => validate_content(content, &path, allowed, non_empty),
        None => Err(InvalidMessage::at(&path, "is required")),
    }
}

/// A string, or an array of parts whose types are in `allowed`.
fn validate_content(content: &Value, path: &str, allowed: &[&str], non_empty: bool) -> Checked {
    match content {
        Value::String(_) => Ok(()),
        Value::Array(parts) if non_empty && parts.is_empty() => {
            Err(InvalidMessage::at(path, "must hold at least one content part"))
        }
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .try_for_each(|(index, part)| validate_part(part, &format!("{path}/{index}"), allowed)),
        other => Err(InvalidMessage::at(
            path,
            format!("must be a string or an array of content parts, not {}", json_kind(other)),
        )),
    }
}

fn validate_part(part: &Value, path: &str, allowed: &[&str]) -> Checked {
    let fields = as_object(part, path, "a content part")?;
    let kind = one_of(fields, "type", path, allowed)?;
    match kind {
        "text" => required_str(fields, "text", path).map(drop),
        "refusal" => required_str(fields, "refusal", path).map(drop),
        "image_url" => validate_image_url(fields, path),
        "input_audio" => validate_input_audio(fields, path),
        _ => validate_file(fields, path),
    }
}

fn validate_image_url(fields: &Map<String, Value>, path: &str) -> Checked {
    let (image, path) = required_object(fields, "image_url", path)?;
    required_str(image, "url", &path)?;
    if present(image, "detail").is_some() {
        one_of(image, "detail", &path, &["auto", "low", "high"])?;
    }
    Ok(())
}

fn validate_input_audio(fields: &Map<String, Value>, path: &str) -> Checked {
    let (audio, path) = required_object(fields, "input_audio", path)?;
    required_str(audio, "data", &path)?;
    one_of(audio, "format", &path, &["wav", "mp3"]).map(drop)
}

fn validate_file(fields: &Map<String, Value>, path: &str) -> Checked {
    let (file, path) = required_object(fields, "file", path)?;
    ["file_data", "file_id", "filename"].iter().try_for_each(|key| optional_str(file, key, &path).map(drop))
}

/// `value` as an object, or a refusal naming what it should have been.
fn as_object<'a>(value: &'a Value, path: &str, what: &str) -> Result<&'a Map<String, Value>, InvalidMessage> {
    value.as_object().ok_or_else(|| {
        InvalidMessage::at(path, format!("must be {what} (an object), not {}", json_kind(value)))
    })
}

/// A key's value unless it is absent or `null` (both mean "not given").
fn present<'a>(fields: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    fields.get(key).filter(|value| !value.is_null())
}

fn required_object<'a>(
    fields: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<(&'a Map<String, Value>, String), InvalidMessage> {
    let path = format!("{path}/{key}");
    let value = present(fields, key).ok_or_else(|| InvalidMessage::at(&path, "is required"))?;
    Ok((as_object(value, &path, "an object")?, path))
}

fn required_str<'a>(
    fields: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, InvalidMessage> {
    optional_str(fields, key, path)?
        .ok_or_else(|| InvalidMessage::at(&format!("{path}/{key}"), "is required"))
}

fn optional_str<'a>(
    fields: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, InvalidMessage> {
    match present(fields, key) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(InvalidMessage::at(
            &format!("{path}/{key}"),
            format!("must be a string, not {}", json_kind(other)),
        )),
    }
}

/// A required string that must be one of `choices`.
fn one_of<'a>(
    fields: &'a Map<String, Value>,
    key: &str,
    path: &str,
    choices: &[&str],
) -> Result<&'a str, InvalidMessage> {
    let value = required_str(fields, key, path)?;
    if choices.contains(&value) {
        Ok(value)
    } else {
        Err(InvalidMessage::at(
            &format!("{path}/{key}"),
            format!("`{value}` is not allowed here; expected one of {}", choices.join(", ")),
        ))
    }
}

/// The JSON type of `value` with its article ("an array"), for refusals
/// here and in the contract checks.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// One message of every shape the door accepts (also run through the
    /// providers' `ChatRequest` in `crate::engine::request`).
    pub(crate) fn accepted_shapes() -> Vec<(&'static str, Value)> {
        vec![
            ("system string", json!([{"role": "system", "content": "be brief"}])),
            (
                "system text parts",
                json!([{"role": "system", "content": [{"type": "text", "text": "be brief"}]}]),
            ),
            ("developer", json!([{"role": "developer", "content": "be brief", "name": "ops"}])),
            ("user string", json!([{"role": "user", "content": "hi"}])),
            (
                "user parts",
                json!([{"role": "user", "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                    {"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}},
                    {"type": "file", "file": {"file_id": "file-1"}}
                ]}]),
            ),
            (
                "tool round trip",
                json!([
                    {"role": "user", "content": "weather in Paris?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
                ]),
            ),
            (
                "assistant without content, SDK nulls",
                json!([{"role": "assistant", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ], "function_call": null, "refusal": null, "audio": null, "name": null}]),
            ),
            (
                "assistant legacy function_call",
                json!([{"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{}"}}]),
            ),
            ("assistant refusal only", json!([{"role": "assistant", "content": null, "refusal": "I can't"}])),
            (
                "assistant refusal part",
                json!([{"role": "assistant", "content": [{"type": "text", "text": "partly "}, {"type": "refusal", "refusal": "no"}]}]),
            ),
            (
                "tool text parts",
                json!([{"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]}]),
            ),
            (
                "vendor keys pass",
                json!([{"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}]),
            ),
        ]
    }

    fn refused(messages: Value) -> InvalidMessage {
        match validate_messages(&messages) {
            Err(err) => err,
            Ok(()) => panic!("accepted {messages}"),
        }
    }

    #[test]
    fn accepts_every_openai_shape() {
        for (name, messages) in accepted_shapes() {
            assert_eq!(validate_messages(&messages), Ok(()), "{name}");
        }
    }

    #[test]
    fn refuses_with_the_path_of_the_first_fault() {
        let cases = [
            (json!({"role": "user"}), ""),
            (json!([]), ""),
            (json!(["hi"]), "/0"),
            (json!([{"content": "hi"}]), "/0/role"),
            (json!([{"role": "robot", "content": "hi"}]), "/0/role"),
            (json!([{"role": 7, "content": "hi"}]), "/0/role"),
            (json!([{"role": "user", "content": "hi", "name": 3}]), "/0/name"),
            (json!([{"role": "user", "content": 42}]), "/0/content"),
            (json!([{"role": "user"}]), "/0/content"),
            (json!([{"role": "user", "content": null}]), "/0/content"),
            (json!([{"role": "user", "content": []}]), "/0/content"),
            (json!([{"role": "system", "content": {"text": "x"}}]), "/0/content"),
            (json!([{"role": "system"}]), "/0/content"),
            (
                json!([{"role": "developer", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]),
                "/0/content/0/type",
            ),
            (json!([{"role": "user", "content": ["hi"]}]), "/0/content/0"),
            (json!([{"role": "user", "content": [{"text": "hi"}]}]), "/0/content/0/type"),
            (json!([{"role": "user", "content": [{"type": "video", "video": {}}]}]), "/0/content/0/type"),
            (
                json!([{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]),
                "/0/content/0/type",
            ),
            (json!([{"role": "user", "content": [{"type": "text", "text": 1}]}]), "/0/content/0/text"),
            (
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}]),
                "/0/content/0/image_url",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
                "/0/content/0/image_url/url",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}]}]),
                "/0/content/0/image_url/detail",
            ),
            (
                json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "ogg"}}]}]),
                "/0/content/0/input_audio/format",
            ),
            (
                json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"format": "wav"}}]}]),
                "/0/content/0/input_audio/data",
            ),
            (json!([{"role": "user", "content": [{"type": "file"}]}]), "/0/content/0/file"),
            (
                json!([{"role": "user", "content": [{"type": "file", "file": {"file_id": 1}}]}]),
                "/0/content/0/file/file_id",
            ),
            (
                json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}]),
                "/1/content",
            ),
            (json!([{"role": "assistant"}]), "/0/content"),
            (json!([{"role": "assistant", "content": null, "tool_calls": []}]), "/0/tool_calls"),
            (json!([{"role": "assistant", "content": 42}]), "/0/content"),
            (
                json!([{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]),
                "/0/content/0/type",
            ),
            (json!([{"role": "assistant", "content": "x", "tool_calls": {}}]), "/0/tool_calls"),
            (
                json!([{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]),
                "/0/tool_calls/0/id",
            ),
            (
                json!([{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "custom", "function": {"name": "f", "arguments": "{}"}}]}]),
                "/0/tool_calls/0/type",
            ),
            (
                json!([{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function"}]}]),
                "/0/tool_calls/0/function",
            ),
            (
                json!([{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}]),
                "/0/tool_calls/0/function/arguments",
            ),
            (
                json!([{"role": "assistant", "content": null, "function_call": {"name": "f"}}]),
                "/0/function_call/arguments",
            ),
            (json!([{"role": "assistant", "content": null, "refusal": 1}]), "/0/refusal"),
            (json!([{"role": "tool", "content": "sunny"}]), "/0/tool_call_id"),
            (json!([{"role": "tool", "tool_call_id": 1, "content": "sunny"}]), "/0/tool_call_id"),
            (json!([{"role": "tool", "tool_call_id": "c"}]), "/0/content"),
            (
                json!([{"role": "tool", "tool_call_id": "c", "content": [{"type": "refusal", "refusal": "x"}]}]),
                "/0/content/0/type",
            ),
        ];
        for (messages, path) in cases {
            let err = refused(messages.clone());
            assert_eq!(err.path, path, "{messages}: {err}");
            assert!(!err.reason.is_empty());
        }
    }

    #[test]
    fn under_prefixes_the_path_and_the_message_names_it() {
        let err = refused(json!([{"role": "user", "content": 42}])).under("/input/messages");
        assert_eq!(err.path, "/input/messages/0/content");
        assert_eq!(
            err.to_string(),
            "`/input/messages/0/content` must be a string or an array of content parts, not a number"
        );
    }
}
