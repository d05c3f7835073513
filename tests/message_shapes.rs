//! Messages are checked at the door against OpenAI's chat schema: every shape
//! accepted is stored, read back and driven to an answer; every shape refused
//! is a 422 naming its JSON path, with nothing stored and no provider called.
//! Every scenario runs on SQLite and on PostgreSQL (see `store_matrix!`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, assert_problem};
use reqwest::{Method, Response};
use serde_json::{Value, json};

store_matrix!(
    accepted_shapes_are_stored_read_back_and_driven,
    refused_shapes_store_nothing_and_call_no_provider,
    chat_completions_accepts_a_tool_round_trip,
    chat_completions_refusal_carries_the_openai_error,
);

/// Shapes the OpenAI chat schema allows that a naive reading would not.
fn accepted() -> Vec<(&'static str, Value)> {
    vec![
        (
            "tool round trip",
            json!([
                {"role": "user", "content": "what is the weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}
            ]),
        ),
        (
            "multi-part user content",
            json!([{"role": "user", "content": [
                {"type": "text", "text": "describe this picture"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}
            ]}]),
        ),
        (
            "developer role",
            json!([
                {"role": "developer", "content": "answer in one word"},
                {"role": "user", "content": "hello"}
            ]),
        ),
        (
            "refusal part",
            json!([
                {"role": "user", "content": "tell me a secret"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot share that"}]},
                {"role": "user", "content": "then say hello"}
            ]),
        ),
    ]
}

/// Refused shapes and the path each refusal names.
fn refused() -> Vec<(Value, &'static str)> {
    vec![
        (json!([{"role": "user", "content": 42}]), "/input/messages/0/content"),
        (json!([{"role": "robot", "content": "beep"}]), "/input/messages/0/role"),
        (
            json!([{"role": "user", "content": "hi"}, {"role": "tool", "content": "sunny"}]),
            "/input/messages/1/tool_call_id",
        ),
        (
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}]),
            "/input/messages/1/content",
        ),
        (
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "video", "video": {}}]}]),
            "/input/messages/0/content/1/type",
        ),
    ]
}

fn job_body(messages: &Value) -> Value {
    json!({"route": "chat", "input": {"messages": messages}, "params": {"temperature": 0}})
}

async fn create_and_wait(gw: &TestGateway, key: &str, body: &Value) -> Response {
    gw.request(Method::POST, "/v1/jobs", ALICE)
        .header("idempotency-key", key)
        .header("prefer", "wait=10")
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn accepted_shapes_are_stored_read_back_and_driven(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let shapes = accepted();
    for (index, (name, messages)) in shapes.iter().enumerate() {
        let response = create_and_wait(&gw, &format!("shape-{index}"), &job_body(messages)).await;
        assert_eq!(response.status(), 201, "{name}");
        let job: Value = response.json().await.unwrap();
        assert_eq!(job["status"], "succeeded", "{name}: {job}");
        let read_back = common::settled_job(&gw, ALICE, job["id"].as_str().unwrap()).await;
        assert_eq!(read_back["status"], "succeeded", "{name}: {read_back}");
    }
    assert_eq!(gw.job_count().await, shapes.len() as i64);
    assert_eq!(gw.sim().calls().total, shapes.len() as u64, "one upstream call per job");
}

async fn refused_shapes_store_nothing_and_call_no_provider(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    for (index, (messages, path)) in refused().into_iter().enumerate() {
        let response = create_and_wait(&gw, &format!("bad-{index}"), &job_body(&messages)).await;
        let problem = assert_problem(response, 422, "invalid-body").await;
        assert_eq!(problem["path"], path, "{messages}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(path), "{problem}");
    }
    assert_eq!(gw.job_count().await, 0, "nothing stored");
    assert_eq!(gw.sim().calls().total, 0, "no provider called");
}

async fn post_chat(gw: &TestGateway, key: &str, messages: &Value) -> Response {
    gw.request(Method::POST, "/v1/chat/completions", ALICE)
        .header("idempotency-key", key)
        .json(&json!({"model": "chat", "messages": messages}))
        .send()
        .await
        .unwrap()
}

async fn chat_completions_accepts_a_tool_round_trip(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let (_, messages) = accepted().swap_remove(0);
    let response = post_chat(&gw, "tools", &messages).await;
    assert_eq!(response.status(), 200);
    let completion: Value = response.json().await.unwrap();
    assert_eq!(completion["object"], "chat.completion", "{completion}");
    assert_eq!(gw.job_count().await, 1);
}

async fn chat_completions_refusal_carries_the_openai_error(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let messages = json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": 42}]);
    let problem = assert_problem(post_chat(&gw, "bad", &messages).await, 422, "invalid-body").await;
    assert_eq!(problem["path"], "/messages/1/content", "the path as this caller sent it: {problem}");
    assert_eq!(problem["error"]["code"], "invalid-body", "{problem}");
    assert!(problem["error"]["message"].as_str().unwrap().contains("/messages/1/content"), "{problem}");
    assert_eq!(gw.job_count().await, 0, "nothing stored");
    assert_eq!(gw.sim().calls().total, 0, "no provider called");
}
