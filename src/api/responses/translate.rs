//! An OpenAI Responses request → a job request: the request as the client
//! sent it (`native`, which a Responses provider is sent), and the job's
//! chat view of it (OpenAI chat terms), from which budgets, contract checks
//! and providers of other dialects work: `instructions` becomes the first
//! message, `input` (a string or items) the messages — `function_call`
//! items the assistant's `tool_calls`, `function_call_output` items `tool`
//! messages — function `tools`, `text.format` the `response_format`,
//! `reasoning.effort` `reasoning_effort`. What the chat view cannot hold is
//! named in `native.untranslated` ([`super::fields`] says what is), so a
//! provider of another dialect is passed over for it rather than sent the
//! request without it.

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::fields::{self, Carried};
use crate::api::Problem;
use crate::api::door::{Expected, MODEL, STREAM};
use crate::jobs::{ChatMessage, DoorName, JobRequest, NativeRequest, validate_params};

/// The problems of this door's requests are titled so.
const TITLE: &str = "Invalid Responses request";

/// What a Responses request becomes.
pub struct Translation {
    pub job: JobRequest,
    pub stream: bool,
    /// The job whose conversation this request continues.
    pub continues: Option<Uuid>,
    /// `background: true`: answer at once, the job runs on.
    pub background: bool,
}

/// Fields of the client's request that say how the gateway answers, not
/// what the provider is asked: never sent upstream (an attempt says
/// whether it streams; the gateway runs a job in the background itself).
const DELIVERY: &[&str] = &["stream", "stream_options", "background"];

/// A Responses request as this door reads it: what the chat view needs by
/// name, every other field kept as sent for the translation's table
/// ([`super::fields`]) to place.
#[derive(Deserialize)]
pub struct ResponsesRequest {
    model: String,
    stream: Option<bool>,
    previous_response_id: Option<String>,
    instructions: Option<String>,
    /// A string, or an array of items.
    input: Value,
    background: Option<bool>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// The fields this door reads by name.
const EXPECTED: [Expected; 6] = [
    MODEL,
    STREAM,
    Expected::optional("previous_response_id", "a string", Value::is_string),
    Expected::optional("instructions", "a string", Value::is_string),
    Expected::required("input", "a string or an array of items", |input| {
        input.is_string() || input.is_array()
    }),
    Expected::optional("background", "a boolean", Value::is_boolean),
];

/// The request body's fields and headers → the job request and how it is
/// answered.
pub fn to_job(fields: Map<String, Value>, headers: &HeaderMap) -> Result<Translation, Problem> {
    let mut body = fields.clone();
    DELIVERY.iter().for_each(|field| drop(body.remove(*field)));
    let request: ResponsesRequest = crate::api::door::typed(fields, TITLE, &EXPECTED)?;
    let (mut translation, untranslated) = request.chat_view()?;
    let headers = crate::api::door::carried_headers(headers, fields::CARRIED_HEADERS);
    let native = NativeRequest { body, headers, untranslated };
    translation.job = translation.job.through(DoorName::OpenAiResponses, Some(native));
    Ok(translation)
}

impl ResponsesRequest {
    /// The job request in chat terms, and what it leaves out that matters.
    fn chat_view(self) -> Result<(Translation, Vec<String>), Problem> {
        let ResponsesRequest {
            model,
            stream,
            previous_response_id,
            instructions,
            input,
            background,
            mut rest,
        } = self;
        let mut untranslated: Vec<String> = rest
            .iter()
            .filter(|(name, value)| fields::top_level(name, value) == Carried::Untranslated)
            .map(|(name, _)| format!("`{name}`"))
            .collect();
        rest.retain(|name, value| fields::top_level(name, value) == Carried::Translated);
        let stream = stream == Some(true);
        let continues = match previous_response_id {
            None => None,
            Some(id) => Some(super::render::job_of_response(&id).ok_or_else(|| {
                invalid(format!("`{id}` is not a response id of this gateway"), "previous_response_id")
            })?),
        };
        let mut messages: Vec<ChatMessage> =
            instructions.into_iter().map(|text| ChatMessage::new("system", text)).collect();
        input_messages(input, &mut messages, &mut untranslated)?;
        let params = params_of(&mut rest, stream, &mut untranslated)?;
        validate_params(&params).map_err(|mut err| {
            err.path = crate::api::door::client_path(&err.path, &RENAMES);
            Problem::invalid_params(err, TITLE)
        })?;
        // `store` is the gateway's to decide (every job is stored): accepted.
        let background = background == Some(true);
        if background && stream {
            return Err(invalid("`background` with `stream` is not supported", "background"));
        }
        untranslated.sort();
        untranslated.dedup();
        let job = JobRequest::chat(model, messages, params);
        Ok((Translation { job, stream, continues, background }, untranslated))
    }
}

/// `input` (a string, or items) → the chat messages it says.
fn input_messages(
    input: Value,
    messages: &mut Vec<ChatMessage>,
    untranslated: &mut Vec<String>,
) -> Result<(), Problem> {
    match input {
        Value::Array(items) => {
            for (index, item) in items.into_iter().enumerate() {
                push_item(messages, item, untranslated).map_err(|detail| {
                    invalid(format!("/input/{index}: {detail}"), &format!("input/{index}"))
                })?;
            }
        }
        text => messages.push(ChatMessage::new("user", text)),
    }
    Ok(())
}

/// The job's parameters from the request's fields (taking them out of
/// `fields`): the sampling settings under their chat names, function tools,
/// the tool choice and the output format.
fn params_of(
    fields: &mut Map<String, Value>,
    stream: bool,
    untranslated: &mut Vec<String>,
) -> Result<Map<String, Value>, Problem> {
    let mut params = Map::new();
    if stream {
        params.insert("stream".into(), true.into());
        // The protocol's stream always reports usage: ask every dialect for it.
        params.insert("stream_options".into(), json!({"include_usage": true}));
    }
    for (from, to) in [
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("metadata", "metadata"),
        ("user", "user"),
    ] {
        if let Some(value) = fields.remove(from).filter(|v| !v.is_null()) {
            params.insert(to.into(), value);
        }
    }
    if let Some(tools) = fields.remove("tools").filter(|t| !t.is_null()) {
        let functions = tools_of(tools, untranslated)?;
        if functions.as_array().is_some_and(|f| !f.is_empty()) {
            params.insert("tools".into(), functions);
        }
    }
    if let Some(effort) =
        fields.remove("reasoning").and_then(|r| r.get("effort").cloned()).filter(Value::is_string)
    {
        params.insert("reasoning_effort".into(), effort);
    }
    if let Some(choice) = fields.remove("tool_choice").filter(|c| !c.is_null())
        && let Some(choice) = tool_choice_of(choice, untranslated)?
    {
        params.insert("tool_choice".into(), choice);
    }
    if let Some(format) = fields.remove("text").and_then(|text| text.get("format").cloned())
        && let Some(format) = response_format_of(format)?
    {
        params.insert("response_format".into(), format);
    }
    Ok(params)
}

/// The Responses fields the chat parameters of another name come from.
const RENAMES: [(&str, &str); 3] = [
    ("max_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning/effort"),
    ("response_format", "text/format"),
];

fn invalid(detail: impl Into<String>, field: &str) -> Problem {
    Problem::invalid_field(TITLE, detail, format!("/{field}"))
}

/// One input item onto the chat messages; one the chat view cannot hold
/// is named in `untranslated` instead.
fn push_item(
    messages: &mut Vec<ChatMessage>,
    item: Value,
    untranslated: &mut Vec<String>,
) -> Result<(), String> {
    match item["type"].as_str() {
        Some(kind) if fields::item(kind) == Carried::Untranslated => {
            untranslated.push(format!("`{kind}` items"));
        }
        None | Some("message") => messages.push(message_of(&item)?),
        Some("function_call") => {
            let (Some(call_id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str()) else {
                return Err("a function_call needs `call_id` and `name`".into());
            };
            let arguments = item["arguments"].as_str().unwrap_or("{}");
            let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
            // Consecutive calls are one assistant turn, as chat has them.
            let last_calls = messages
                .last_mut()
                .filter(|last| last.role == "assistant")
                .and_then(|last| last.extra.get_mut("tool_calls"))
                .and_then(Value::as_array_mut);
            match last_calls {
                Some(calls) => calls.push(call),
                None => {
                    messages.push(ChatMessage::new("assistant", Value::Null).with("tool_calls", vec![call]))
                }
            }
        }
        Some("function_call_output") => {
            let Some(call_id) = item["call_id"].as_str() else {
                return Err("a function_call_output needs `call_id`".into());
            };
            let output = match &item["output"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            messages.push(ChatMessage::new("tool", output).with("tool_call_id", call_id));
        }
        Some(_) => {}
    }
    Ok(())
}

fn message_of(item: &Value) -> Result<ChatMessage, String> {
    let role = item["role"].as_str().ok_or("a message needs a `role`")?;
    if !matches!(role, "user" | "assistant" | "system" | "developer") {
        return Err(format!("role `{role}` is not one of user, assistant, system, developer"));
    }
    let content = match &item["content"] {
        Value::String(text) => Value::String(text.clone()),
        Value::Array(parts) => {
            let mut out = Vec::with_capacity(parts.len());
            for part in parts {
                out.push(match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("input_text" | "output_text"), Some(text)) => json!({"type": "text", "text": text}),
                    (Some("input_image"), _) => match part["image_url"].as_str() {
                        Some(url) => json!({"type": "image_url", "image_url": {"url": url}}),
                        None => return Err("an input_image needs an `image_url`".into()),
                    },
                    (kind, _) => {
                        return Err(format!("a content part `{}` is not supported", kind.unwrap_or("?")));
                    }
                });
            }
            if role == "assistant" {
                // Chat's assistant content is text.
                Value::String(out.iter().filter_map(|p| p["text"].as_str()).collect())
            } else {
                Value::Array(out)
            }
        }
        _ => return Err("`content` must be a string or an array of parts".into()),
    };
    Ok(ChatMessage::new(role, content))
}

/// Function tools in chat's shape; another kind is named in `untranslated`.
fn tools_of(tools: Value, untranslated: &mut Vec<String>) -> Result<Value, Problem> {
    let Value::Array(tools) = tools else {
        return Err(invalid("`tools` must be an array", "tools"));
    };
    let mut functions = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        let at = format!("tools/{index}");
        if fields::tool(tool) == Carried::Untranslated {
            untranslated.push(format!("`{}` tools", tool["type"].as_str().unwrap_or("untyped")));
            continue;
        }
        let Some(name) = tool["name"].as_str() else {
            return Err(invalid(format!("tool {index} needs a `name`"), &at));
        };
        let mut function =
            json!({"name": name, "parameters": tool.get("parameters").cloned().unwrap_or(json!({}))});
        for field in ["description", "strict"] {
            if let Some(value) = tool.get(field).filter(|v| !v.is_null()) {
                function[field] = value.clone();
            }
        }
        functions.push(json!({"type": "function", "function": function}));
    }
    Ok(functions.into())
}

/// A tool choice in chat's terms; one that forces a tool the chat view
/// cannot hold (a custom or built-in tool) is named in `untranslated`.
fn tool_choice_of(choice: Value, untranslated: &mut Vec<String>) -> Result<Option<Value>, Problem> {
    match (&choice, choice["type"].as_str(), choice["name"].as_str()) {
        (Value::String(mode), _, _) if matches!(mode.as_str(), "auto" | "none" | "required") => {
            Ok(Some(choice))
        }
        (_, Some("function"), Some(name)) => {
            Ok(Some(json!({"type": "function", "function": {"name": name}})))
        }
        (Value::Object(_), Some(kind), _) => {
            untranslated.push(format!("`tool_choice` of type `{kind}`"));
            Ok(None)
        }
        _ => Err(invalid(
            "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"name\"}",
            "tool_choice",
        )),
    }
}

fn response_format_of(format: Value) -> Result<Option<Value>, Problem> {
    match format["type"].as_str() {
        Some("text") | None => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema =
                json!({"name": format["name"].as_str().unwrap_or("response"), "schema": format["schema"]});
            if let Some(strict) = format.get("strict").filter(|s| s.is_boolean()) {
                schema["strict"] = strict.clone();
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        Some(other) => {
            Err(invalid(format!("`text.format` of type `{other}` is not supported"), "text/format"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_call_round_trip_becomes_chat_messages() {
        let Value::Object(fields) = json!({"model": "tools", "instructions": "Be brief.", "input": [
            {"role": "user", "content": "Weather?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"x\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "max_output_tokens": 50})
        else {
            unreachable!()
        };
        let Ok(translation) = to_job(fields, &HeaderMap::new()) else { panic!("translates") };
        let job = serde_json::to_value(translation.job).unwrap_or_default();
        let messages = job["input"]["messages"].as_array().cloned().unwrap_or_default();
        let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!(messages[2]["tool_calls"][0]["id"], "c1");
        let params = &job["params"];
        assert_eq!(params["max_tokens"], 50);
        assert_eq!(params["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(params["response_format"]["json_schema"]["name"], "w");
        assert_eq!(job["door"], "openai-responses");
    }

    #[test]
    fn a_parameter_is_refused_under_the_name_the_client_sent() {
        for (field, value, path) in [
            ("max_output_tokens", json!(-1), "/max_output_tokens"),
            ("temperature", json!("hot"), "/temperature"),
            ("instructions", json!(1), "/instructions"),
        ] {
            let mut body = json!({"model": "chat", "input": "x"});
            body[field] = value;
            let Value::Object(fields) = body else { unreachable!() };
            let problem =
                to_job(fields, &HeaderMap::new()).err().map(|p| format!("{p:?}")).unwrap_or_default();
            assert!(problem.contains(&format!("String(\"{path}\")")), "{field}: {problem}");
        }
    }

    #[test]
    fn what_the_chat_view_cannot_hold_is_named_and_the_request_kept_whole() {
        let Value::Object(fields) = json!({"model": "codex", "input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "sealed"},
            {"role": "user", "content": "go on"}],
            "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "function", "name": "shell"}],
            "reasoning": {"effort": "high", "summary": "auto"}, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "s1", "store": false, "stream": true})
        else {
            unreachable!()
        };
        let mut headers = HeaderMap::new();
        headers.insert("openai-beta", axum::http::HeaderValue::from_static("responses=v1"));
        let Ok(translation) = to_job(fields, &headers) else { panic!("carried, not refused") };
        let job = serde_json::to_value(translation.job).unwrap_or_default();
        let native = &job["native"];
        assert_eq!(native["untranslated"], json!(["`custom` tools", "`reasoning` items"]));
        assert_eq!(native["body"]["input"][0]["encrypted_content"], "sealed", "the request as sent");
        assert!(native["body"].get("stream").is_none(), "delivery is the gateway's to say");
        assert_eq!(native["headers"]["openai-beta"], "responses=v1");
        let params = &job["params"];
        assert_eq!(params["reasoning_effort"], "high");
        assert_eq!(params["tools"].as_array().map(Vec::len), Some(1), "the function tool");
        assert!(params.get("prompt_cache_key").is_none(), "a hint stays out of the chat view");
    }
}
