//! An OpenAI-shaped request translated into Gemini's `GenerateContentRequest`,
//! so a conversation (tools, tool results, images, a JSON schema) can fail
//! over from an OpenAI- or Anthropic-dialect provider to Gemini and back
//! without the client noticing.
//!
//! | OpenAI | Gemini |
//! |---|---|
//! | `system` / `developer` messages | `systemInstruction.parts[].text` |
//! | `user` / `assistant` messages | `contents[]` of role `user` / `model`, `parts[].text` |
//! | an assistant's `tool_calls` | `functionCall` parts (`args` the parsed `arguments`) |
//! | `tool` messages | `functionResponse` parts of a `user` turn, named after the call they answer |
//! | `image_url` (data URL), `input_audio`, `file` (data URL) parts | `inlineData` parts |
//! | `tools` | `tools[{functionDeclarations}]` |
//! | `tool_choice` | `toolConfig.functionCallingConfig` (`AUTO`, `ANY` + `allowedFunctionNames`, `NONE`) |
//! | `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`, `top_k`, `stop`, `seed`, `presence_penalty`, `frequency_penalty` | `generationConfig` |
//! | `response_format` `json_object` / `json_schema` | `generationConfig.responseMimeType` (+ `responseSchema`) |
//!
//! What has no translation is an [`Untranslatable`] with the reason:
//! `cannot_express` reports it before the engine picks the provider, and
//! `request_body` refuses to build a body rather than send the request
//! with it dropped. Fields neither translated nor refused pass through at
//! the top level (Gemini's own: `safetySettings`, `cachedContent`…).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::schema;
pub(crate) use super::untranslatable::Untranslatable;
use crate::types::{ChatRequest, Content, Message, TRANSLATED_OR_HINTS};

/// Gemini's own translations beside [`TRANSLATED_OR_HINTS`]: never passed
/// through.
const DROPPED: [&str; 6] =
    ["top_k", "stop", "seed", "presence_penalty", "frequency_penalty", "response_format"];

/// OpenAI generation parameters and their `generationConfig` names.
const GENERATION: [(&str, &str); 6] = [
    ("top_p", "topP"),
    ("top_k", "topK"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
    ("stop", "stopSequences"),
];

/// The request as Gemini's `GenerateContentRequest` (the model is in the
/// URL, and streaming is the URL's method: neither is in the body).
pub(crate) fn request_body(req: &ChatRequest) -> Result<Value, Untranslatable> {
    refused(req)?;
    let mut body: Map<String, Value> = req
        .extra
        .iter()
        .filter(|(k, _)| !TRANSLATED_OR_HINTS.contains(&k.as_str()) && !DROPPED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (system, conversation): (Vec<&Message>, Vec<&Message>) =
        req.messages.iter().partition(|m| is_system(m));
    let instruction: Vec<String> =
        system.iter().map(|m| m.content.text()).filter(|t| !t.is_empty()).collect();
    if !instruction.is_empty() {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": instruction.join("\n\n")}]}));
    }
    body.insert("contents".into(), Value::Array(contents(&conversation)?));
    let tools = req.extra.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty());
    if let Some(tools) = tools {
        let declarations = tools.iter().map(declaration).collect::<Result<Vec<_>, _>>()?;
        body.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
        if let Some(config) = tool_config(req.extra.get("tool_choice"))? {
            body.insert("toolConfig".into(), config);
        }
    }
    let generation = generation_config(req, body.remove("generationConfig"))?;
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    Ok(Value::Object(body))
}

pub(crate) fn is_system(message: &Message) -> bool {
    message.role == "system" || message.role == "developer"
}

/// What an OpenAI request may ask that Gemini (as translated here) cannot
/// carry: several choices, log probabilities, logit biases, audio out,
/// predicted outputs, stored-completion metadata, a one-call-at-a-time
/// promise, the legacy `functions`.
fn refused(req: &ChatRequest) -> Result<(), Untranslatable> {
    let extra = &req.extra;
    let set = |field: &str| extra.get(field).is_some_and(|v| !v.is_null() && *v != Value::Bool(false));
    let refuse = |field, why| Err(Untranslatable::Field { field, why });
    if extra.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return refuse("n", "more than one choice (candidateCount is not translated)");
    }
    if set("logprobs") || set("top_logprobs") {
        return refuse("logprobs", "Gemini's log probabilities are not translated");
    }
    if extra.get("logit_bias").and_then(Value::as_object).is_some_and(|b| !b.is_empty()) {
        return refuse("logit_bias", "Gemini has no logit bias");
    }
    if set("metadata") {
        return refuse("metadata", "Gemini's API has no request metadata");
    }
    if set("audio") || extra.get("modalities").is_some_and(|m| *m != json!(["text"]) && !m.is_null()) {
        return refuse("modalities", "only text answers are translated");
    }
    for (field, why) in [
        ("prediction", "Gemini has no predicted outputs"),
        ("web_search_options", "Gemini's search grounding is a tool of its own, not translated"),
        ("reasoning_effort", "Gemini's thinking budget is not translated"),
        ("functions", "the legacy `functions` are not translated; send `tools`"),
        ("function_call", "the legacy `function_call` is not translated; send `tool_choice`"),
    ] {
        if set(field) {
            return refuse(field, why);
        }
    }
    let has_tools = extra.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    if has_tools && extra.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        return refuse("parallel_tool_calls", "Gemini cannot be told to call one function at a time");
    }
    Ok(())
}

/// `generationConfig`: the caller's own (a Gemini field passed through)
/// under the translated OpenAI parameters.
fn generation_config(req: &ChatRequest, own: Option<Value>) -> Result<Map<String, Value>, Untranslatable> {
    let mut config = match own {
        Some(Value::Object(config)) => config,
        _ => Map::new(),
    };
    let extra = &req.extra;
    let max = req
        .max_tokens
        .map(Value::from)
        .or_else(|| extra.get("max_completion_tokens").filter(|v| v.is_u64()).cloned());
    if let Some(max) = max {
        config.insert("maxOutputTokens".into(), max);
    }
    if let Some(temperature) = req.temperature {
        config.insert("temperature".into(), temperature.into());
    }
    for (openai, gemini) in GENERATION {
        let value = match extra.get(openai) {
            None | Some(Value::Null) => continue,
            Some(Value::String(stop)) if openai == "stop" => json!([stop]),
            Some(Value::Array(stops)) if openai == "stop" && stops.is_empty() => continue,
            Some(value) => value.clone(),
        };
        config.insert(gemini.into(), value);
    }
    let format = extra.get("response_format");
    match format.and_then(|f| f.get("type")).and_then(Value::as_str) {
        None | Some("text") => {}
        Some("json_object") => {
            config.insert("responseMimeType".into(), "application/json".into());
        }
        Some("json_schema") => {
            config.insert("responseMimeType".into(), "application/json".into());
            if let Some(wanted) = format.and_then(|f| f.pointer("/json_schema/schema")) {
                config
                    .insert("responseSchema".into(), schema::to_gemini(wanted, "response_format's schema")?);
            }
        }
        Some(_) => {
            return Err(Untranslatable::Field {
                field: "response_format",
                why: "only text, json_object and json_schema translate",
            });
        }
    }
    Ok(config)
}

/// One OpenAI tool as a function declaration. Gemini refuses an `OBJECT`
/// without properties, so a function that takes none declares no
/// `parameters` at all.
fn declaration(tool: &Value) -> Result<Value, Untranslatable> {
    let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
    let Some(function) = tool.get("function").filter(|_| kind == "function") else {
        return Err(Untranslatable::Tool(kind.to_owned()));
    };
    let name = function.get("name").and_then(Value::as_str).ok_or(Untranslatable::ToolCall)?;
    let mut out = Map::new();
    out.insert("name".into(), name.into());
    if let Some(description) = function.get("description").filter(|d| d.is_string()) {
        out.insert("description".into(), description.clone());
    }
    let parameters = function
        .get("parameters")
        .filter(|p| p.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty()));
    if let Some(parameters) = parameters {
        out.insert(
            "parameters".into(),
            schema::to_gemini(parameters, &format!("tool `{name}`'s parameters"))?,
        );
    }
    Ok(Value::Object(out))
}

/// OpenAI's `tool_choice` as Gemini's `toolConfig`; `None` when nothing is
/// to be said (Gemini's default is `AUTO`).
fn tool_config(choice: Option<&Value>) -> Result<Option<Value>, Untranslatable> {
    let mode = |mode: &str| Some(json!({"functionCallingConfig": {"mode": mode}}));
    Ok(match choice {
        None | Some(Value::Null) => None,
        Some(Value::String(choice)) => match choice.as_str() {
            "auto" => mode("AUTO"),
            "required" => mode("ANY"),
            "none" => mode("NONE"),
            other => return Err(Untranslatable::ToolChoice(format!("`{other}`"))),
        },
        Some(forced) if forced.get("type").and_then(Value::as_str) == Some("function") => {
            let name = forced.pointer("/function/name").and_then(Value::as_str);
            let name =
                name.ok_or_else(|| Untranslatable::ToolChoice("forcing a function without a name".into()))?;
            Some(json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}))
        }
        Some(other) => return Err(Untranslatable::ToolChoice(other.to_string())),
    })
}

/// The conversation (system messages taken out) as Gemini `contents`.
/// Consecutive turns of one role are one turn (Gemini wants them to
/// alternate); a message that says nothing (empty text, no calls) is left
/// out, since Gemini refuses empty parts.
fn contents(conversation: &[&Message]) -> Result<Vec<Value>, Untranslatable> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in conversation {
        let (role, parts) = match message.role.as_str() {
            "user" => ("user", parts(&message.content)?),
            "assistant" => ("model", model_parts(message, &mut names)?),
            "tool" => ("user", vec![function_response(message, &names)?]),
            other => return Err(Untranslatable::Role(other.to_owned())),
        };
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, turn)) if *last == role => turn.extend(parts),
            _ => out.push((role, parts)),
        }
    }
    Ok(out.into_iter().map(|(role, parts)| json!({"role": role, "parts": parts})).collect())
}

/// An assistant message: its text, then a `functionCall` part per tool
/// call (whose id is remembered with its function's name, for the answer).
/// A call's `extra_content.google.thought_signature` — how Google's own
/// OpenAI-compatible endpoint hands thinking models' signatures out — goes
/// back as the part's `thoughtSignature`.
fn model_parts(message: &Message, names: &mut HashMap<String, String>) -> Result<Vec<Value>, Untranslatable> {
    let mut out = parts(&message.content)?;
    let calls = message.extra.get("tool_calls").and_then(Value::as_array).into_iter().flatten();
    for call in calls {
        let id = call.get("id").and_then(Value::as_str).ok_or(Untranslatable::ToolCall)?;
        let name = call.pointer("/function/name").and_then(Value::as_str).ok_or(Untranslatable::ToolCall)?;
        let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or_default();
        let args = match arguments.trim() {
            "" => json!({}),
            text => serde_json::from_str::<Value>(text)
                .map_err(|err| Untranslatable::Arguments { id: id.to_owned(), why: err.to_string() })?,
        };
        if !args.is_object() {
            return Err(Untranslatable::Arguments { id: id.to_owned(), why: "not an object".into() });
        }
        let mut part = json!({"functionCall": {"name": name, "args": args}});
        if let (Some(signature), Some(object)) =
            (call.pointer("/extra_content/google/thought_signature"), part.as_object_mut())
        {
            object.insert("thoughtSignature".into(), signature.clone());
        }
        names.insert(id.to_owned(), name.to_owned());
        out.push(part);
    }
    Ok(out)
}

/// A `tool` message as a `functionResponse` part, named after the call it
/// answers. Gemini takes the response as an object: a result that is a
/// JSON object is sent as it is, anything else as `{"output": …}` (the key
/// Gemini reads a function's output from).
fn function_response(message: &Message, names: &HashMap<String, String>) -> Result<Value, Untranslatable> {
    let id = message.extra.get("tool_call_id").and_then(Value::as_str).ok_or(Untranslatable::ToolCallId)?;
    let name = names
        .get(id)
        .map(String::as_str)
        .or_else(|| message.extra.get("name").and_then(Value::as_str))
        .ok_or_else(|| Untranslatable::UnknownToolCall(id.to_owned()))?;
    let text = message.content.text();
    let response = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(object)) => Value::Object(object),
        Ok(other) if !text.trim().is_empty() => json!({"output": other}),
        _ => json!({"output": text}),
    };
    Ok(json!({"functionResponse": {"name": name, "response": response}}))
}

/// Content as Gemini parts; empty text says nothing and is left out.
fn parts(content: &Content) -> Result<Vec<Value>, Untranslatable> {
    match content {
        Content::None => Ok(Vec::new()),
        Content::Text(text) if text.is_empty() => Ok(Vec::new()),
        Content::Text(text) => Ok(vec![json!({"text": text})]),
        Content::Parts(parts) => parts.iter().filter_map(|p| part(p).transpose()).collect(),
    }
}

/// One OpenAI content part as a Gemini part (`None` for empty text).
fn part(part: &Value) -> Result<Option<Value>, Untranslatable> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    let refuse = |why| Err(Untranslatable::Part { kind: kind.to_owned(), why });
    match kind {
        "text" => {
            Ok(part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()).map(|t| json!({"text": t})))
        }
        "image_url" => match part.pointer("/image_url/url").and_then(Value::as_str).and_then(data_url) {
            Some(inline) => Ok(Some(inline)),
            None => refuse("Gemini takes images inline (a base64 data URL) or from its File API, not by URL"),
        },
        "input_audio" => {
            let data = part.pointer("/input_audio/data").and_then(Value::as_str);
            let format = part.pointer("/input_audio/format").and_then(Value::as_str);
            match (data, format) {
                (Some(data), Some(format)) => {
                    Ok(Some(json!({"inlineData": {"mimeType": format!("audio/{format}"), "data": data}})))
                }
                _ => refuse("audio without its data or format"),
            }
        }
        "file" => match part.pointer("/file/file_data").and_then(Value::as_str).and_then(data_url) {
            Some(inline) => Ok(Some(inline)),
            None => refuse("only a file sent inline (file_data) translates, not an OpenAI file id"),
        },
        _ => refuse("Gemini has no such part"),
    }
}

/// A base64 data URL as an `inlineData` part.
fn data_url(url: &str) -> Option<Value> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    let mime = meta.strip_suffix(";base64")?;
    Some(json!({"inlineData": {"mimeType": mime, "data": data}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An OpenAI-shaped request from JSON, as a client sends it.
    fn openai(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap_or_default()
    }

    #[test]
    fn a_conversation_becomes_contents_and_a_system_instruction() -> Result<(), Untranslatable> {
        let req = openai(json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "developer", "content": "in English"},
            {"role": "user", "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "now?"}]},
            {"role": "user", "content": ""}
        ], "max_tokens": 50, "temperature": 0.2, "top_p": 0.9, "stop": "END", "seed": 7,
           "user": "u-1", "stream_options": {"include_usage": true}, "n": 1, "safetySettings": []}));
        assert_eq!(
            request_body(&req)?,
            json!({
                "systemInstruction": {"parts": [{"text": "be brief\n\nin English"}]},
                "contents": [
                    {"role": "user", "parts": [{"text": "hi"}]},
                    {"role": "model", "parts": [{"text": "hello"}]},
                    {"role": "user", "parts": [{"text": "and "}, {"text": "now?"}]}
                ],
                "generationConfig": {"maxOutputTokens": 50, "temperature": 0.2, "topP": 0.9,
                    "stopSequences": ["END"], "seed": 7},
                "safetySettings": []
            })
        );
        Ok(())
    }

    #[test]
    fn tools_and_tool_choice_become_declarations_and_a_calling_mode() -> Result<(), Untranslatable> {
        let weather = json!({"type": "function", "function": {"name": "weather", "description": "d",
            "parameters": {"type": "object", "additionalProperties": false,
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
        let now = json!({"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}});
        let cases = [
            (json!("auto"), Some(json!({"mode": "AUTO"}))),
            (json!("required"), Some(json!({"mode": "ANY"}))),
            (json!("none"), Some(json!({"mode": "NONE"}))),
            (
                json!({"type": "function", "function": {"name": "now"}}),
                Some(json!({"mode": "ANY", "allowedFunctionNames": ["now"]})),
            ),
            (Value::Null, None),
        ];
        for (choice, expected) in cases {
            let req =
                openai(json!({"messages": [{"role": "user", "content": "hi"}], "tools": [weather, now],
                "tool_choice": choice, "parallel_tool_calls": true}));
            let body = request_body(&req)?;
            assert_eq!(body.pointer("/toolConfig/functionCallingConfig"), expected.as_ref(), "{choice}");
            assert_eq!(
                body["tools"],
                json!([{"functionDeclarations": [
                    {"name": "weather", "description": "d", "parameters": {"type": "OBJECT",
                        "properties": {"city": {"type": "STRING"}}, "required": ["city"]}},
                    {"name": "now"}
                ]}])
            );
            assert!(body.get("parallel_tool_calls").is_none() && body.get("tool_choice").is_none());
        }
        Ok(())
    }

    #[test]
    fn a_tool_round_trip_becomes_function_calls_and_named_responses() -> Result<(), Untranslatable> {
        let req = openai(json!({"messages": [
            {"role": "user", "content": "weather in Utrecht and Delft?"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Utrecht\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Delft\"}"},
                 "extra_content": {"google": {"thought_signature": "c2ln"}}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"sky\":\"sun\"}"},
            {"role": "user", "content": "and tomorrow?"}
        ]}));
        assert_eq!(
            request_body(&req)?["contents"],
            json!([
                {"role": "user", "parts": [{"text": "weather in Utrecht and Delft?"}]},
                {"role": "model", "parts": [
                    {"text": "Looking."},
                    {"functionCall": {"name": "weather", "args": {"city": "Utrecht"}}},
                    {"functionCall": {"name": "weather", "args": {"city": "Delft"}}, "thoughtSignature": "c2ln"}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "weather", "response": {"output": "rain"}}},
                    {"functionResponse": {"name": "weather", "response": {"sky": "sun"}}},
                    {"text": "and tomorrow?"}
                ]}
            ])
        );
        Ok(())
    }

    #[test]
    fn a_json_schema_format_becomes_a_response_schema() -> Result<(), Untranslatable> {
        let req = openai(json!({"messages": [{"role": "user", "content": "a city"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "city", "strict": true,
                "schema": {"type": "object", "additionalProperties": false,
                    "properties": {"name": {"type": "string"}}, "required": ["name"]}}}}));
        assert_eq!(
            request_body(&req)?["generationConfig"],
            json!({"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT",
                "properties": {"name": {"type": "STRING"}}, "required": ["name"]}})
        );
        let object = openai(
            json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"},
            "max_completion_tokens": 9}),
        );
        assert_eq!(
            request_body(&object)?["generationConfig"],
            json!({"responseMimeType": "application/json", "maxOutputTokens": 9})
        );
        Ok(())
    }

    #[test]
    fn images_and_audio_go_inline() -> Result<(), Untranslatable> {
        let req = openai(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0"}},
            {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}
        ]}]}));
        assert_eq!(
            request_body(&req)?["contents"][0]["parts"],
            json!([{"text": "what is this?"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0"}},
                {"inlineData": {"mimeType": "audio/wav", "data": "UklGR"}}])
        );
        Ok(())
    }

    #[test]
    fn what_has_no_translation_is_refused_with_the_reason() {
        let user = |extra: Value| {
            let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
            if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                body.extend(extra.clone());
            }
            openai(body)
        };
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let cases = [
            (user(json!({"n": 2})), "`n`"),
            (user(json!({"logprobs": true})), "`logprobs`"),
            (user(json!({"metadata": {"run": "7"}})), "`metadata`"),
            (user(json!({"tools": tools, "parallel_tool_calls": false})), "one function at a time"),
            (user(json!({"tools": [{"type": "web_search"}]})), "type `web_search`"),
            (
                user(
                    json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"not": {}}}}}),
                ),
                "`not`",
            ),
            (
                openai(
                    json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.jpg"}}]}]}),
                ),
                "not by URL",
            ),
            (
                openai(json!({"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]})),
                "`call_9`",
            ),
            (
                openai(json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":"}}]}]})),
                "not a JSON object",
            ),
            (
                openai(json!({"messages": [{"role": "function", "name": "f", "content": "x"}]})),
                "`function` message",
            ),
        ];
        for (req, why) in cases {
            let reason = request_body(&req).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(reason.contains(why), "{why}: {reason}");
        }
    }
}
