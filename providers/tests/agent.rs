//! The simulator as a model an agent can finish a task with, over HTTP in
//! each dialect it speaks: any model (the default echo too) calls an
//! offered tool until a tool result answers the call, then answers in
//! words; a forced `tool_choice` calls even after a result; `none` is
//! words; structured outputs are JSON the client's schema accepts; and the
//! same request gets the same answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use intentgate_providers::sim::SimHandle;
use serde_json::{Value, json};

/// The weather tool's parameters, as a client's JSON Schema.
fn weather_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["city", "unit", "days"],
        "properties": {"city": {"type": "string", "minLength": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}}})
}

/// What pydantic sends for a model with a nested model, a nullable field
/// and a list (openai `parse`, instructor, LangChain's structured output).
fn person_schema() -> Value {
    json!({"$defs": {"Pet": {"type": "object", "additionalProperties": false, "required": ["name", "kind"],
            "properties": {"name": {"type": "string"}, "kind": {"type": "string", "enum": ["cat", "dog"]}}}},
        "type": "object", "additionalProperties": false, "required": ["name", "age", "nickname", "pets", "born"],
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 18},
            "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}},
            "born": {"type": "string", "format": "date"}}})
}

fn assert_valid(schema: &Value, value: &Value) {
    let validator = jsonschema::options().should_validate_formats(true).build(schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{value} fails its schema: {errors:?}");
}

/// POSTs `body` to `path`; the status and the JSON answer.
async fn post(sim: &SimHandle, path: &str, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    let mut request = http()
        .post(format!("http://{}{path}", sim.addr()))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")))
}

async fn openai(sim: &SimHandle, body: &Value) -> Value {
    let (status, answer) = post(sim, "/v1/chat/completions", &[], body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

async fn anthropic(sim: &SimHandle, body: &Value) -> Value {
    let headers = [("anthropic-version", "2023-06-01"), ("x-api-key", "k")];
    let (status, answer) = post(sim, "/v1/messages", &headers, body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

async fn gemini(sim: &SimHandle, body: &Value) -> Value {
    let path = "/v1beta/models/gemini-sim:generateContent";
    let (status, answer) = post(sim, path, &[("x-goog-api-key", GEMINI_KEY)], body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The OpenAI answer's tool call: its name and parsed arguments.
fn openai_call(answer: &Value) -> (String, Value) {
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    (
        call["name"].as_str().unwrap().to_owned(),
        serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap(),
    )
}

fn openai_text(answer: &Value) -> &str {
    assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{answer}");
    answer["choices"][0]["message"]["content"].as_str().unwrap()
}

fn openai_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": weather_schema()}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])
}

#[tokio::test]
async fn openai_the_default_model_calls_a_tool_then_answers_its_result() {
    let sim = sim().await;
    let mut body = json!({"model": "gpt-sim", "tools": openai_tools(),
        "messages": [{"role": "user", "content": "Weather in Utrecht?"}]});
    let asked = openai(&sim, &body).await;
    let (name, arguments) = openai_call(&asked);
    assert_eq!(name, "get_weather", "auto calls the first tool");
    assert_valid(&weather_schema(), &arguments);
    assert_eq!(openai(&sim, &body).await, asked, "the same request, the same answer");

    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(asked["choices"][0]["message"].clone());
    let id = asked["choices"][0]["message"]["tool_calls"][0]["id"].clone();
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "Sunny, 21 C"}));
    assert_eq!(openai_text(&openai(&sim, &body).await), "echo: Sunny, 21 C", "a result ends the loop");

    body["tool_choice"] = json!({"type": "function", "function": {"name": "get_time"}});
    assert_eq!(
        openai_call(&openai(&sim, &body).await),
        ("get_time".into(), json!({})),
        "forced: a call again"
    );
    body["tool_choice"] = "required".into();
    assert_eq!(openai_call(&openai(&sim, &body).await).0, "get_weather");

    let first_turn = json!({"model": "sim:ok", "tools": openai_tools(), "tool_choice": "none",
        "messages": [{"role": "user", "content": "Weather in Utrecht?"}]});
    assert_eq!(openai_text(&openai(&sim, &first_turn).await), "echo: Weather in Utrecht?");
    let no_tools = json!({"model": "sim:ok", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(openai_text(&openai(&sim, &no_tools).await), "echo: hi");
}

#[tokio::test]
async fn openai_structured_outputs_follow_the_client_s_schema() {
    let sim = sim().await;
    let format = json!({"type": "json_schema", "json_schema": {"name": "Person", "strict": true, "schema": person_schema()}});
    let body = json!({"model": "sim:ok", "response_format": format,
        "messages": [{"role": "user", "content": "Ada Lovelace, born 1815"}]});
    let answer = openai(&sim, &body).await;
    let person: Value = serde_json::from_str(openai_text(&answer)).unwrap();
    assert_valid(&person_schema(), &person);
    assert_eq!(person["name"], "Ada Lovelace, born 1815");
    assert_eq!(openai(&sim, &body).await, answer, "deterministic");

    let mut sloppy = body.clone();
    sloppy["model"] = "sim:invent-key".into();
    let invented: Value = serde_json::from_str(openai_text(&openai(&sim, &sloppy).await)).unwrap();
    let validator = jsonschema::validator_for(&person_schema()).unwrap();
    assert!(!validator.is_valid(&invented), "sim:invent-key still breaks the schema: {invented}");

    let mut json_mode = body;
    json_mode["response_format"] = json!({"type": "json_object"});
    let object: Value = serde_json::from_str(openai_text(&openai(&sim, &json_mode).await)).unwrap();
    assert!(object.is_object(), "{object}");
}

fn anthropic_tools() -> Value {
    json!([{"name": "get_weather", "input_schema": weather_schema()},
        {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}])
}

fn anthropic_call(answer: &Value) -> (String, Value) {
    assert_eq!(answer["stop_reason"], "tool_use", "{answer}");
    let block = &answer["content"][0];
    assert_eq!(block["type"], "tool_use");
    (block["name"].as_str().unwrap().to_owned(), block["input"].clone())
}

#[tokio::test]
async fn anthropic_tools_tool_choice_and_output_config() {
    let sim = sim().await;
    let mut body = json!({"model": "claude-sim", "max_tokens": 256, "tools": anthropic_tools(),
        "messages": [{"role": "user", "content": "Weather in Delft?"}]});
    let asked = anthropic(&sim, &body).await;
    let (name, input) = anthropic_call(&asked);
    assert_eq!(name, "get_weather");
    assert_valid(&weather_schema(), &input);

    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": asked["content"]}));
    let id = asked["content"][0]["id"].clone();
    messages.push(
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "Rain"}]}),
    );
    let answered = anthropic(&sim, &body).await;
    assert_eq!(answered["stop_reason"], "end_turn", "{answered}");
    assert_eq!(answered["content"][0]["text"], "echo: Rain");

    body["tool_choice"] = json!({"type": "any"});
    assert_eq!(anthropic_call(&anthropic(&sim, &body).await).0, "get_weather", "any: a call after a result");
    body["tool_choice"] = json!({"type": "tool", "name": "get_time"});
    assert_eq!(anthropic_call(&anthropic(&sim, &body).await), ("get_time".into(), json!({})));
    body["tool_choice"] = json!({"type": "none"});
    assert_eq!(anthropic(&sim, &body).await["content"][0]["type"], "text");

    let structured = json!({"model": "claude-sim", "max_tokens": 256,
        "output_config": {"format": {"type": "json_schema", "schema": person_schema()}},
        "messages": [{"role": "user", "content": "Grace Hopper"}]});
    let answer = anthropic(&sim, &structured).await;
    assert_eq!(answer["stop_reason"], "end_turn", "{answer}");
    let person: Value = serde_json::from_str(answer["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_valid(&person_schema(), &person);
}

/// Gemini's function declarations: its schema subset, upper-case types.
fn gemini_tools() -> Value {
    json!([{"functionDeclarations": [
        {"name": "get_weather", "parameters": {"type": "OBJECT", "required": ["city", "days"],
            "properties": {"city": {"type": "STRING"}, "days": {"type": "INTEGER", "minimum": 1, "maximum": 7}}}},
        {"name": "get_time"}]}])
}

fn gemini_part(answer: &Value) -> &Value {
    assert_eq!(answer["candidates"][0]["finishReason"], "STOP", "{answer}");
    &answer["candidates"][0]["content"]["parts"][0]
}

#[tokio::test]
async fn gemini_function_calling_modes_and_response_schemas() {
    let sim = sim().await;
    let mut body = json!({"tools": gemini_tools(),
        "contents": [{"role": "user", "parts": [{"text": "Weather in Oslo?"}]}]});
    let asked = gemini(&sim, &body).await;
    let call = gemini_part(&asked)["functionCall"].clone();
    assert_eq!(call["name"], "get_weather", "{asked}");
    assert_eq!(call["args"], json!({"city": "Weather in Oslo?", "days": 1}));

    let contents = body["contents"].as_array_mut().unwrap();
    contents.push(json!({"role": "model", "parts": [{"functionCall": call}]}));
    contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
        "response": {"output": "Snow"}}}]}));
    assert_eq!(gemini_part(&gemini(&sim, &body).await)["text"], "echo: Snow");

    body["toolConfig"] =
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_time"]}});
    assert_eq!(gemini_part(&gemini(&sim, &body).await)["functionCall"]["name"], "get_time");
    body["toolConfig"] = json!({"functionCallingConfig": {"mode": "ANY"}});
    assert_eq!(gemini_part(&gemini(&sim, &body).await)["functionCall"]["name"], "get_weather");
    body["toolConfig"] = json!({"functionCallingConfig": {"mode": "NONE"}});
    body["contents"].as_array_mut().unwrap().truncate(1);
    assert_eq!(gemini_part(&gemini(&sim, &body).await)["text"], "echo: Weather in Oslo?");

    let ask = |config: Value| {
        json!({"generationConfig": config,
        "contents": [{"role": "user", "parts": [{"text": "Katherine Johnson"}]}]})
    };
    let json_schema =
        ask(json!({"responseMimeType": "application/json", "responseJsonSchema": person_schema()}));
    let text = gemini_part(&gemini(&sim, &json_schema).await)["text"].as_str().unwrap().to_owned();
    assert_valid(&person_schema(), &serde_json::from_str(&text).unwrap());

    let gemini_schema = json!({"type": "OBJECT", "required": ["name", "tags"], "properties": {
        "name": {"type": "STRING"}, "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 2},
        "rank": {"type": "INTEGER", "nullable": true, "minimum": 3}}});
    let openapi = ask(json!({"responseMimeType": "application/json", "responseSchema": gemini_schema}));
    let text = gemini_part(&gemini(&sim, &openapi).await)["text"].as_str().unwrap().to_owned();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"name": "Katherine Johnson", "tags": ["Katherine Johnson", "Katherine Johnson 2"], "rank": 3})
    );
}
