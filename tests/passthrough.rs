//! A Messages request passed through: an Anthropic provider is sent what
//! the client sent (thinking, cache breakpoints, context management, betas)
//! with only the model changed, and answers in its own words; a provider
//! of another dialect is passed over for what its translation cannot hold,
//! with the reason. The intent is the whole native request: another
//! thinking setting under the same key is a conflict. Counted at the
//! simulator, on both stores.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, set_route};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    a_claude_code_turn_reaches_an_anthropic_provider_as_sent,
    a_thinking_request_passes_an_openai_provider_over_with_the_reason,
    a_passed_through_stream_is_the_providers_and_a_plain_retry_its_message,
    three_thinking_turns_with_a_tool_send_every_signed_block_back_unchanged,
);

const BETA: &str = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27";

fn claude_code_turn() -> Value {
    let model =
        serde_json::from_str::<Value>(include_str!("bodies/claude_code_turn.json")).unwrap()["model"].clone();
    common::claude_code_turn(model.as_str().unwrap())
}

async fn post(gw: &TestGateway, key: &str, body: &Value) -> Response {
    gw.client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", BETA)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Only the Anthropic provider in the chain.
async fn anthropic_only(store: &TestStore) -> TestGateway {
    TestGateway::start_tweaked(store, |doc| {
        set_route(doc, "chat", "chain", toml::Value::Array(vec!["sim-fallback".into()]));
    })
    .await
}

async fn a_claude_code_turn_reaches_an_anthropic_provider_as_sent(store: TestStore) {
    let gw = anthropic_only(&store).await;
    let sent = claude_code_turn();
    let first = post(&gw, "turn-3", &sent).await;
    assert_eq!(first.status(), 200);
    let job = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let answer = first.bytes().await.unwrap();

    let seen = gw.sim().last_request(&job).unwrap();
    let mut expected = sent.clone();
    expected["model"] = "sim:ok".into();
    assert_eq!(seen.body.unwrap(), expected, "byte-identical but for the provider's model");
    assert_eq!(seen.headers["anthropic-beta"], BETA, "the betas are carried");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");

    let replay = post(&gw, "turn-3", &sent).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap(), answer, "replayed byte for byte");

    let mut other = sent.clone();
    other["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    let conflict = post(&gw, "turn-3", &other).await;
    assert_eq!(conflict.status(), 409, "another thinking setting is another intent");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
    assert_eq!(gw.job_count().await, 1);
}

async fn a_thinking_request_passes_an_openai_provider_over_with_the_reason(store: TestStore) {
    // The shipped chain: an OpenAI provider first, then an Anthropic one.
    let gw = TestGateway::start(&store).await;
    let response = post(&gw, "think-1", &claude_code_turn()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-fallback");
    let calls = gw.sim().calls();
    assert_eq!(
        calls.by_path.get("/v1/chat/completions"),
        None,
        "the OpenAI provider is never sent it: {calls:?}"
    );
    assert_eq!(calls.total, 1);

    // With no Anthropic provider left, the job fails saying what could not be sent.
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(doc, "chat", "chain", toml::Value::Array(vec!["sim-primary".into()]));
    })
    .await;
    let problem: Value = post(&gw, "think-2", &claude_code_turn()).await.json().await.unwrap();
    let message = problem["error"]["message"].as_str().unwrap();
    for named in ["sim-primary", "`thinking`", "`thinking` blocks", "`output_config`"] {
        assert!(message.contains(named), "the message the SDK prints names {named}: {message}");
    }
    assert_eq!(gw.sim().calls().total, 0, "nothing was sent with a field dropped");
}

fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn a_passed_through_stream_is_the_providers_and_a_plain_retry_its_message(store: TestStore) {
    let gw = anthropic_only(&store).await;
    let mut streamed = claude_code_turn();
    streamed["stream"] = true.into();
    let live = post(&gw, "stream-1", &streamed).await;
    assert_eq!(live.status(), 200);
    let live = live.text().await.unwrap();
    let kinds: Vec<String> = events(&live).iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds.first().map(String::as_str), Some("message_start"), "{live}");
    assert_eq!(kinds.last().map(String::as_str), Some("message_stop"), "{live}");
    assert!(kinds.contains(&"content_block_stop".to_owned()), "every event of the provider's: {kinds:?}");
    assert_eq!(events(&live)[0]["message"]["model"], "sim:ok", "the provider's own message_start");

    let replay = post(&gw, "stream-1", &streamed).await.text().await.unwrap();
    assert_eq!(replay, live, "replayed byte for byte");

    let plain = post(&gw, "stream-1", &claude_code_turn()).await;
    assert_eq!(plain.headers()["idempotent-replayed"], "true", "a plain retry is the streamed job");
    let message: Value = plain.json().await.unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["model"], "sim:ok");
    assert_eq!(message["content"][0]["type"], "thinking", "{message}");
    assert!(
        message["content"][0]["signature"].as_str().is_some_and(|s| !s.is_empty()),
        "assembled whole: {message}"
    );
    assert!(message["content"][1]["text"].as_str().is_some_and(|t| !t.is_empty()), "{message}");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
}

/// One turn of a thinking conversation with a tool, through the `claude`
/// route: the answer's content.
async fn thinking_turn(gw: &TestGateway, key: &str, messages: &Value) -> Response {
    let body = json!({"model": "claude", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "read_file", "description": "Reads a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}],
        "messages": messages});
    post(gw, key, &body).await
}

async fn three_thinking_turns_with_a_tool_send_every_signed_block_back_unchanged(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut messages = vec![json!({"role": "user", "content": "What is in notes.txt?"})];
    let first: Value = thinking_turn(&gw, "think-turn-1", &json!(messages)).await.json().await.unwrap();
    let content = first["content"].as_array().unwrap().clone();
    assert_eq!(content[0]["type"], "thinking", "{first}");
    assert_eq!(content[1]["type"], "tool_use", "{first}");
    let call = content[1]["id"].clone();
    messages.push(json!({"role": "assistant", "content": content}));
    messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "milk, eggs"}]}));

    let second = thinking_turn(&gw, "think-turn-2", &json!(messages)).await;
    assert_eq!(second.status(), 200, "the provider verified the first turn's signature");
    let second: Value = second.json().await.unwrap();
    messages.push(json!({"role": "assistant", "content": second["content"]}));
    messages.push(json!({"role": "user", "content": "Thanks. Anything else?"}));

    let third = thinking_turn(&gw, "think-turn-3", &json!(messages)).await;
    assert_eq!(third.status(), 200, "both turns' signatures verified");
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages"), Some(&3), "the Anthropic provider, three times");

    // One character of thinking changed: the provider refuses, and says why.
    messages[1]["content"][0]["thinking"] = "Thinking about: something else".into();
    let altered = thinking_turn(&gw, "think-turn-4", &json!(messages)).await;
    assert_ne!(altered.status(), 200);
    let problem = altered.text().await.unwrap();
    assert!(problem.contains("Invalid `signature`"), "{problem}");
}
