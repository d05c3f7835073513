//! Every OpenAI-shaped body, chunk and event the gateway answers validates
//! against OpenAI's published OpenAPI description (the parts the tests
//! need, cut by `scripts/openai-schemas` into `tests/schemas/openai.json`):
//! chat completions plain, with tools, with `n` and logprobs, translated
//! from an Anthropic provider, streamed, and their errors; Responses
//! objects, stream events and input item lists; embeddings lists.
//! Against the simulator on loopback; the store does not change a body, so
//! SQLite alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::{ALICE, TestGateway, TestStore};
use serde_json::{Value, json};

/// The bundle's `$defs`, read once.
fn bundle() -> &'static Value {
    static BUNDLE: OnceLock<Value> = OnceLock::new();
    BUNDLE.get_or_init(|| {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemas/openai.json"));
        serde_json::from_str(&text.unwrap()).unwrap()
    })
}

/// Asserts `value` is a valid `schema` (a component's name), listing every
/// violation with its path.
fn assert_valid(schema: &str, value: &Value, what: &str) {
    let root = json!({"$ref": format!("#/$defs/{schema}"), "$defs": bundle()["$defs"]});
    let validator = jsonschema::validator_for(&root).unwrap();
    let evaluation = validator.evaluate(value);
    let errors: Vec<String> = evaluation
        .iter_errors()
        .map(|err| format!("at {}: {} (schema {})", err.instance_location, err.error, err.schema_location))
        .collect();
    assert!(validator.is_valid(value), "{what} is not a valid {schema}: {errors:#?}\n{value}");
}

/// The component of `ResponseStreamEvent` for events of type `kind` (the
/// union's own errors would list every other event type).
fn event_schema(kind: &str) -> String {
    let union = bundle()["$defs"]["ResponseStreamEvent"]["anyOf"].as_array().unwrap();
    let name = union.iter().filter_map(|member| member["$ref"].as_str()).find_map(|reference| {
        let name = reference.rsplit('/').next().unwrap();
        let kinds = &bundle()["$defs"][name]["properties"]["type"]["enum"];
        kinds.as_array().unwrap().contains(&kind.into()).then(|| name.to_owned())
    });
    name.unwrap_or_else(|| panic!("no published event has type `{kind}`"))
}

async fn post(gw: &TestGateway, path: &str, key: &str, body: &Value) -> reqwest::Response {
    gw.post_door(path, key, body).await
}

/// The `data:` payloads of an SSE body that are JSON.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str(data).ok())
        .collect()
}

async fn store() -> Option<TestStore> {
    TestStore::new(common::Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_bodies_chunks_and_errors_follow_the_published_schema() {
    let Some(store) = store().await else { return };
    let gw = TestGateway::start(&store).await;
    let hello = json!({"model": "chat", "messages": [{"role": "user", "content": "Say hi"}]});
    let plain: Value = post(&gw, "/v1/chat/completions", "s-plain", &hello).await.json().await.unwrap();
    assert_valid("CreateChatCompletionResponse", &plain, "a plain completion");

    let two =
        json!({"model": "chat", "n": 2, "logprobs": true, "messages": [{"role": "user", "content": "Two"}]});
    let two: Value = post(&gw, "/v1/chat/completions", "s-two", &two).await.json().await.unwrap();
    assert_valid("CreateChatCompletionResponse", &two, "two choices with logprobs");

    let tools = json!({"model": "tools", "messages": [{"role": "user", "content": "Find order 42"}],
        "tools": [{"type": "function", "function": {"name": "find_order",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]});
    let called: Value = post(&gw, "/v1/chat/completions", "s-tools", &tools).await.json().await.unwrap();
    assert!(called["choices"][0]["message"]["tool_calls"].is_array(), "{called}");
    assert_valid("CreateChatCompletionResponse", &called, "a tool call");

    gw.sim().queue(Some("sim:ok"), "status=503", 1).unwrap(); // the primary fails: Anthropic answers
    let translated: Value =
        post(&gw, "/v1/chat/completions", "s-anthropic", &hello).await.json().await.unwrap();
    assert_valid("CreateChatCompletionResponse", &translated, "a completion translated from Anthropic");

    for (key, usage) in [("s-stream", false), ("s-stream-usage", true)] {
        let mut body = hello.clone();
        body["stream"] = true.into();
        if usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let text = post(&gw, "/v1/chat/completions", key, &body).await.text().await.unwrap();
        let chunks = events(&text);
        assert!(chunks.len() > 2, "{text}");
        for chunk in &chunks {
            assert_valid("CreateChatCompletionStreamResponse", chunk, "a chunk");
        }
    }

    let reused = json!({"model": "chat", "messages": [{"role": "user", "content": "Other"}]});
    let error: Value = post(&gw, "/v1/chat/completions", "s-plain", &reused).await.json().await.unwrap();
    assert_valid("ErrorResponse", &error, "a key-reused error");
    let invalid = json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "temperature": 9});
    let error: Value = post(&gw, "/v1/chat/completions", "s-bad", &invalid).await.json().await.unwrap();
    assert_valid("ErrorResponse", &error, "an invalid-body error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_objects_events_and_items_follow_the_published_schema() {
    let Some(store) = store().await else { return };
    let gw = TestGateway::start(&store).await;
    let body = json!({"model": "chat", "instructions": "Be brief.", "input": "Say hi"});
    let response: Value = post(&gw, "/v1/responses", "s-r", &body).await.json().await.unwrap();
    assert_valid("Response", &response, "a response");

    let tools = json!({"model": "tools", "input": "Find order 42", "tools": [{"type": "function",
        "name": "find_order", "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}]});
    let called: Value = post(&gw, "/v1/responses", "s-r-tools", &tools).await.json().await.unwrap();
    assert_eq!(called["output"][0]["type"], "function_call", "{called}");
    assert_valid("Response", &called, "a response with a function call");

    for (key, body) in [("s-r-stream", &body), ("s-r-tools-stream", &tools)] {
        let mut streamed = body.clone();
        streamed["stream"] = true.into();
        let text = post(&gw, "/v1/responses", key, &streamed).await.text().await.unwrap();
        let all = events(&text);
        assert!(all.len() > 4, "{text}");
        for event in &all {
            let schema = event_schema(event["type"].as_str().unwrap());
            assert_valid(&schema, event, &format!("event {}", event["type"]));
        }
    }

    gw.sim().queue(Some("sim:ok"), "hold=s-bg", 1).unwrap();
    let background = json!({"model": "chat", "input": "Later", "background": true});
    let queued: Value = post(&gw, "/v1/responses", "s-r-bg", &background).await.json().await.unwrap();
    assert_valid("Response", &queued, "a background response");
    gw.sim().release("s-bg");

    let id = response["id"].as_str().unwrap();
    let items: Value = gw.get(ALICE, &format!("/v1/responses/{id}/input_items")).await.json().await.unwrap();
    assert_valid("ResponseItemList", &items, "an input item list");
    let second = json!({"model": "tools", "input": [
        {"type": "function_call", "call_id": "call_1", "name": "find_order", "arguments": "{\"id\":\"42\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "shipped"}], "tools": tools["tools"]});
    let answered: Value = post(&gw, "/v1/responses", "s-r-round", &second).await.json().await.unwrap();
    let round = answered["id"].as_str().unwrap();
    let items: Value =
        gw.get(ALICE, &format!("/v1/responses/{round}/input_items")).await.json().await.unwrap();
    assert_valid("ResponseItemList", &items, "the items of a tool round trip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_lists_follow_the_published_schema() {
    let Some(store) = store().await else { return };
    let gw = TestGateway::start(&store).await;
    let body = json!({"model": "embeddings", "input": ["a fox", "a dog"], "dimensions": 8});
    let list: Value = post(&gw, "/v1/embeddings", "s-e", &body).await.json().await.unwrap();
    assert_valid("CreateEmbeddingResponse", &list, "an embeddings list");
}
