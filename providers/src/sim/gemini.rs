//! The simulator's Gemini API: `POST /v1beta/models/{model}:generateContent`
//! and `:streamGenerateContent?alt=sse`, as strict as Google is about what
//! it is sent (the key in `x-goog-api-key`, no field it does not know, a
//! schema in its OpenAPI subset), so a translation that leaks an OpenAI
//! field or keyword fails here as it would there.
//!
//! A request is read through an OpenAI-shaped view of it ([`view`]), so the
//! answers are the other dialects' (`echo: …`, tool calls built from the
//! declared schema, JSON that follows `responseSchema`); they are written
//! as `GenerateContentResponse`s. Gemini's stream has no terminator: the
//! chunk that finishes (its last text, `finishReason`, the full
//! `usageMetadata`) stands in for one, so `stream-no-done` leaves it out.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::prompt::{Event, Prompt, Said, pieces, usage};

/// The model and whether the call streams, from the path's last segment
/// (`sim:ok:generateContent`: the method is after the last colon); or the
/// status and reason Google gives a method it does not have, or a stream
/// not asked for as SSE (the simulator speaks no other stream format).
pub(crate) fn target(target: &str, query: Option<&str>) -> Result<(String, bool), (u16, String)> {
    let (model, method) = target.rsplit_once(':').unwrap_or((target, ""));
    let sse = query.is_some_and(|q| q.split('&').any(|pair| pair == "alt=sse"));
    match method {
        "generateContent" => Ok((model.to_owned(), false)),
        "streamGenerateContent" if sse => Ok((model.to_owned(), true)),
        "streamGenerateContent" => {
            Err((400, "the simulator streams as server-sent events only: add ?alt=sse".into()))
        }
        other => Err((404, format!("method `{other}` is not found for models/{model}"))),
    }
}

/// Google's error body for `status`, with the wait of a `RetryInfo` when
/// there is one (Google says it there, not in a `Retry-After` header).
pub(crate) fn error(status: u16, message: &str, retry_after: Option<&str>) -> Value {
    let name = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        500 => "INTERNAL",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    };
    let mut error = json!({"code": status, "message": message, "status": name});
    let delay = retry_after.filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    if let (Some(delay), Some(object)) = (delay, error.as_object_mut()) {
        object.insert(
            "details".into(),
            json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{delay}s")}]),
        );
    }
    json!({"error": error})
}

/// Google's error answer for `status`.
pub(crate) fn refuse(status: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (code, Json(error(status, message, None))).into_response()
}

/// Top-level fields of a `GenerateContentRequest`.
const REQUEST_FIELDS: [&str; 8] = [
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "labels",
];

/// Fields of its `generationConfig`.
const GENERATION_FIELDS: [&str; 18] = [
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "thinkingConfig",
    "mediaResolution",
    "speechConfig",
];

/// Keywords of Gemini's `Schema`.
const SCHEMA_FIELDS: [&str; 22] = [
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// What Gemini refuses before doing any work: no key (403), a field it
/// does not know, a conversation it cannot read, a schema outside its
/// subset (400). `Err` is the status and Google's message.
pub(crate) fn validate(headers: &HeaderMap, body: &Value) -> Result<(), (u16, String)> {
    let keyed = headers.get("x-goog-api-key").is_some_and(|key| !key.is_empty());
    if !keyed {
        return Err((
            403,
            "Method doesn't allow unregistered callers (callers without established identity). Please use \
             API Key or other form of API consumer identity to call this API."
                .into(),
        ));
    }
    validate_body(body)
}

/// What Gemini refuses in a body (400), wherever it is served: a field it
/// does not know, a conversation it cannot read, a schema outside its subset.
pub(crate) fn validate_body(body: &Value) -> Result<(), (u16, String)> {
    let invalid = |message: String| Err((400, message));
    let unknown =
        |field: &str| format!("Invalid JSON payload received. Unknown name \"{field}\": Cannot find field.");
    let Some(fields) = body.as_object() else { return invalid("the request is not a JSON object".into()) };
    if let Some(field) = fields.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
        return invalid(unknown(field));
    }
    let config = fields.get("generationConfig").and_then(Value::as_object);
    if let Some(field) =
        config.into_iter().flat_map(Map::keys).find(|k| !GENERATION_FIELDS.contains(&k.as_str()))
    {
        return invalid(unknown(field));
    }
    if let Some(schema) = config.and_then(|c| c.get("responseSchema")) {
        schema_fields(schema, "generation_config.response_schema").map_err(|why| (400, why))?;
    }
    let declarations = fields.get("tools").and_then(Value::as_array).into_iter().flatten();
    for (i, declaration) in
        declarations.filter_map(|t| t.get("functionDeclarations")?.as_array()).flatten().enumerate()
    {
        if let Some(parameters) = declaration.get("parameters") {
            schema_fields(parameters, &format!("tools.function_declarations[{i}].parameters"))
                .map_err(|why| (400, why))?;
        }
    }
    contents(fields.get("contents")).map_err(|why| (400, why))
}

/// A schema's keywords, recursively: Gemini's subset only, and no `OBJECT`
/// without properties where it declares a function's parameters.
fn schema_fields(schema: &Value, at: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else { return Err(format!("{at}: a schema must be an object")) };
    if let Some(field) = schema.keys().find(|k| !SCHEMA_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "Invalid JSON payload received. Unknown name \"{field}\" at '{at}': Cannot find field."
        ));
    }
    let object = schema.get("type").and_then(Value::as_str).is_some_and(|t| t.eq_ignore_ascii_case("object"));
    let properties = schema.get("properties").and_then(Value::as_object);
    if object && at.ends_with(".parameters") && properties.is_none_or(Map::is_empty) {
        return Err(format!("{at}.properties: should be non-empty for OBJECT type"));
    }
    for (name, property) in properties.into_iter().flatten() {
        schema_fields(property, &format!("{at}.properties[{name}]"))?;
    }
    if let Some(items) = schema.get("items") {
        schema_fields(items, &format!("{at}.items"))?;
    }
    for (i, choice) in schema.get("anyOf").and_then(Value::as_array).into_iter().flatten().enumerate() {
        schema_fields(choice, &format!("{at}.any_of[{i}]"))?;
    }
    Ok(())
}

/// Part fields that carry data (a part has exactly one).
const PART_DATA: [&str; 7] = [
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
];

/// `contents`: turns of role `user` or `model`, each with parts that each
/// carry one non-empty datum; function calls and responses named.
fn contents(contents: Option<&Value>) -> Result<(), String> {
    let turns = contents.and_then(Value::as_array).filter(|c| !c.is_empty());
    let turns = turns.ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    for (i, turn) in turns.iter().enumerate() {
        let role = turn.get("role").and_then(Value::as_str).unwrap_or("user");
        if role != "user" && role != "model" {
            return Err(format!("Please use a valid role: user, model. (contents[{i}].role `{role}`)"));
        }
        let parts = turn.get("parts").and_then(Value::as_array).filter(|p| !p.is_empty());
        let parts = parts.ok_or(format!(
            "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        ))?;
        for part in parts {
            let data: Vec<&str> = PART_DATA.iter().copied().filter(|k| part.get(*k).is_some()).collect();
            if data.len() != 1 {
                return Err(format!(
                    "contents[{i}]: a part must hold exactly one of {PART_DATA:?}, not {data:?}"
                ));
            }
            if part.get("text").is_some_and(|t| t.as_str().is_none_or(str::is_empty)) {
                return Err("Unable to submit request because it has an empty text parameter.".into());
            }
            for (kind, payload) in [("functionCall", "args"), ("functionResponse", "response")] {
                let Some(call) = part.get(kind) else { continue };
                if call.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                    return Err(format!("contents[{i}]: a {kind} without a name"));
                }
                if call.get(payload).is_some_and(|v| !v.is_object()) {
                    return Err(format!("contents[{i}]: a {kind}'s {payload} must be an object"));
                }
            }
        }
    }
    Ok(())
}

/// The Gemini request as the OpenAI-shaped body the simulator's answers
/// are read from: contents as messages (function calls as `tool_calls`,
/// function responses as `tool` messages holding their `output`), function
/// declarations as tools, `toolConfig` as `tool_choice`, a JSON
/// `responseMimeType` as `response_format` with `responseSchema` (Gemini's
/// upper-case types in lower case, as JSON Schema writes them) or
/// `responseJsonSchema` as its schema.
pub(crate) fn view(body: &Value, model: &str, stream: bool) -> Value {
    let mut messages = Vec::new();
    let system = body.pointer("/systemInstruction/parts").and_then(Value::as_array);
    let system: String = system.into_iter().flatten().filter_map(|p| p.get("text")?.as_str()).collect();
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system}));
    }
    for turn in body.get("contents").and_then(Value::as_array).into_iter().flatten() {
        messages.extend(turn_messages(turn));
    }
    let tools: Vec<Value> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|tool| tool.get("functionDeclarations")?.as_array())
        .flatten()
        .map(|d| json!({"type": "function", "function": {"name": d.get("name"), "parameters": lower_types(d.get("parameters").unwrap_or(&Value::Null))}}))
        .collect();
    let mut view = json!({"model": model, "stream": stream, "messages": messages, "tools": tools});
    if let Some(choice) = tool_choice(body) {
        view["tool_choice"] = choice;
    }
    let config = body.get("generationConfig");
    if config.and_then(|c| c.get("responseMimeType")).and_then(Value::as_str) == Some("application/json") {
        let schema = config.and_then(|c| {
            c.get("responseSchema").map(lower_types).or_else(|| c.get("responseJsonSchema").cloned())
        });
        view["response_format"] = match schema {
            Some(schema) => {
                json!({"type": "json_schema", "json_schema": {"name": "gemini", "schema": schema}})
            }
            None => json!({"type": "json_object"}),
        };
    }
    view
}

/// `toolConfig.functionCallingConfig` as OpenAI's `tool_choice`: mode
/// `ANY` forces the first allowed function (any function when none is
/// named), `NONE` forbids calls; `AUTO` (or no config) leaves it open.
fn tool_choice(body: &Value) -> Option<Value> {
    let calling = body.pointer("/toolConfig/functionCallingConfig")?;
    match calling.get("mode").and_then(Value::as_str)? {
        "ANY" => Some(match calling.pointer("/allowedFunctionNames/0") {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => json!("required"),
        }),
        "NONE" => Some(json!("none")),
        _ => None,
    }
}

/// One Gemini turn as OpenAI messages: a model turn as an assistant
/// message (its calls as `tool_calls`), a user turn's function responses
/// as `tool` messages, then its text as a user message.
fn turn_messages(turn: &Value) -> Vec<Value> {
    let parts = turn.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let text: String = parts.iter().filter_map(|p| p.get("text")?.as_str()).collect();
    if turn.get("role").and_then(Value::as_str) == Some("model") {
        let calls: Vec<Value> = parts
            .iter()
            .filter_map(|p| p.get("functionCall"))
            .enumerate()
            .map(|(i, call)| json!({"id": format!("call_sim_{i}"), "type": "function",
                "function": {"name": call.get("name"), "arguments": call.get("args").unwrap_or(&json!({})).to_string()}}))
            .collect();
        let content = if text.is_empty() { Value::Null } else { Value::String(text) };
        return vec![json!({"role": "assistant", "content": content, "tool_calls": calls})];
    }
    let mut out: Vec<Value> = parts
        .iter()
        .filter_map(|p| p.get("functionResponse"))
        .map(|answer| {
            let response = answer.get("response").unwrap_or(&Value::Null);
            let output = match response.get("output") {
                Some(Value::String(output)) => output.clone(),
                _ => response.to_string(),
            };
            json!({"role": "tool", "tool_call_id": answer.get("name"), "content": output})
        })
        .collect();
    if !text.is_empty() {
        out.push(json!({"role": "user", "content": text}));
    }
    out
}

/// A schema with Gemini's `STRING`, `OBJECT`… written as JSON Schema's.
fn lower_types(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("type", Value::String(kind)) => (key.clone(), kind.to_ascii_lowercase().into()),
                    ("properties", Value::Object(properties)) => (
                        key.clone(),
                        Value::Object(properties.iter().map(|(k, v)| (k.clone(), lower_types(v))).collect()),
                    ),
                    _ => (key.clone(), lower_types(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(lower_types).collect()),
        other => other.clone(),
    }
}

/// The usage Gemini reports, as it names the counts.
fn usage_metadata(input: u64, output: u64) -> Value {
    json!({"promptTokenCount": input, "candidatesTokenCount": output, "totalTokenCount": input + output})
}

/// Safety ratings: all negligible, or one category blocked.
fn ratings(blocked: bool) -> Value {
    match blocked {
        false => json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "NEGLIGIBLE"}]),
        true => {
            json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}])
        }
    }
}

/// One `GenerateContentResponse` with candidate 0 made of `parts` (none:
/// no `content`), its `finishReason` if any, and `usage`.
fn response(prompt: &Prompt, parts: Option<Vec<Value>>, finish: Option<&str>, usage: Value) -> Value {
    let mut candidate = json!({"index": 0, "safetyRatings": ratings(finish == Some("SAFETY"))});
    if let Some(parts) = parts {
        candidate["content"] = json!({"role": "model", "parts": parts});
    }
    if let Some(finish) = finish {
        candidate["finishReason"] = finish.into();
    }
    json!({"candidates": [candidate], "usageMetadata": usage, "modelVersion": prompt.model,
        "responseId": format!("sim{:016x}", prompt.nonce)})
}

/// A whole answer: candidate 0 says what was said (text or one function
/// call), or, stopped for safety, nothing.
pub(crate) fn body(prompt: &Prompt, said: &[Said]) -> Value {
    let (input, output) = usage(prompt, said);
    let usage = usage_metadata(input, output);
    match said.first() {
        Some(Said::Stopped(_)) => response(prompt, None, Some("SAFETY"), usage),
        Some(Said::Tool(call)) => {
            let part = json!({"functionCall": {"name": call.name, "args": call.input}});
            response(prompt, Some(vec![part]), Some("STOP"), usage)
        }
        Some(Said::Text(text)) => response(prompt, Some(vec![json!({"text": text})]), Some("STOP"), usage),
        None => response(prompt, Some(vec![json!({"text": ""})]), Some("STOP"), usage),
    }
}

/// A streamed answer, and separately the chunk that finishes it: text in
/// pieces (the finishing chunk carries the last), a function call whole
/// (the finishing chunk carries no content), or the text said before a
/// safety stop (the finishing chunk stops it, saying nothing).
pub(crate) fn events(prompt: &Prompt, said: &[Said]) -> (Vec<Event>, Event) {
    let (input, output) = usage(prompt, said);
    let event = |value: Value| Event { name: None, data: value.to_string() };
    let so_far = json!({"promptTokenCount": input, "totalTokenCount": input});
    let texts = |pieces: Vec<String>| -> Vec<Event> {
        pieces
            .into_iter()
            .map(|piece| event(response(prompt, Some(vec![json!({"text": piece})]), None, so_far.clone())))
            .collect()
    };
    let usage = usage_metadata(input, output);
    match said.first() {
        Some(Said::Tool(call)) => {
            let part = json!({"functionCall": {"name": call.name, "args": call.input}});
            let first = event(response(prompt, Some(vec![part]), None, so_far.clone()));
            (vec![first], event(response(prompt, None, Some("STOP"), usage)))
        }
        Some(Said::Stopped(text)) => {
            (texts(pieces(text)), event(response(prompt, None, Some("SAFETY"), usage)))
        }
        Some(Said::Text(text)) => {
            let mut pieces = pieces(text);
            let last = pieces.pop().unwrap_or_default();
            let finish = response(prompt, Some(vec![json!({"text": last})]), Some("STOP"), usage);
            (texts(pieces), event(finish))
        }
        None => (Vec::new(), event(response(prompt, Some(vec![json!({"text": ""})]), Some("STOP"), usage))),
    }
}

/// A prompt the safety filters refused: no candidates, the block reason in
/// `promptFeedback`, in a 200 as Gemini answers it (whole, or as a stream
/// of that one response).
pub(crate) fn blocked(prompt: &Prompt) -> Value {
    json!({
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": ratings(true)},
        "usageMetadata": {"promptTokenCount": prompt.prompt_words, "totalTokenCount": prompt.prompt_words},
        "modelVersion": prompt.model,
        "responseId": format!("sim{:016x}", prompt.nonce),
    })
}
