//! The Anthropic Messages door (`POST /v1/messages`) over real HTTP, against
//! the simulator on loopback, on both stores: the same job machinery as
//! chat completions — one job and one upstream call per key, a replay byte
//! for byte — in Anthropic's shapes (message, event stream, errors), with a
//! failover from an Anthropic-dialect provider to an OpenAI one that the
//! client cannot see. Upstream calls are counted at the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, set_provider, set_route};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    a_message_is_one_job_and_replays_byte_for_byte,
    a_streamed_message_speaks_anthropics_events_and_replays_them,
    a_forced_tool_call_and_its_round_trip,
    a_key_reused_with_another_body_or_door_is_refused_in_anthropics_shape,
    a_failover_from_anthropic_to_openai_is_invisible,
    bad_requests_and_keys_get_anthropics_errors,
    count_tokens_is_an_upper_bound_and_stores_nothing,
);

/// `count_tokens` counts what the route's first provider would be sent
/// (its tokenizer over the body): more than the words, more for a longer
/// prompt, and nothing is stored or sent.
async fn count_tokens_is_an_upper_bound_and_stores_nothing(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let count = |text: &str| {
        let body =
            json!({"model": "chat", "system": "Be brief.", "messages": [{"role": "user", "content": text}]});
        let request =
            gw.client.post(gw.url("/v1/messages/count_tokens")).header("x-api-key", ALICE).json(&body);
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()["input_tokens"].as_u64().unwrap()
        }
    };
    let short = count("Say hello.").await;
    let long = count(&"Say hello again and again. ".repeat(20)).await;
    assert!(short >= 5, "at least the words: {short}");
    assert!(long > short + 80, "{short} → {long}");
    assert_eq!(gw.job_count().await, 0);
    assert_eq!(gw.sim().calls().total, 0);
}

async fn post(gw: &TestGateway, key: &str, body: &Value) -> Response {
    gw.client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn hello() -> Value {
    json!({"model": "chat", "max_tokens": 64, "system": "Be brief.",
        "messages": [{"role": "user", "content": "Say hello."}]})
}

fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default().to_owned();
            let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

async fn a_message_is_one_job_and_replays_byte_for_byte(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first = post(&gw, "hello-1", &hello()).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-intentgate-provider"], "sim-primary");
    let job_id = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let bytes = first.bytes().await.unwrap();
    let message: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(message["type"], "message", "{message}");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "chat");
    assert_eq!(message["content"][0]["type"], "text");
    assert!(!message["content"][0]["text"].as_str().unwrap().is_empty());
    assert_eq!(message["stop_reason"], "end_turn");
    assert!(message["usage"]["input_tokens"].as_u64().unwrap() > 0, "{message}");

    let again = post(&gw, "hello-1", &hello()).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.unwrap(), bytes, "the replay is the original byte for byte");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
    assert_eq!(gw.job_count().await, 1);

    // The system prompt reached the provider as chat's system message.
    let upstream = gw.sim().last_request(&job_id).unwrap().body.unwrap();
    assert_eq!(upstream["messages"][0], json!({"role": "system", "content": "Be brief."}));
    // The job records the door it came through.
    let job: Value = gw.get(ALICE, &format!("/v1/jobs/{job_id}")).await.json().await.unwrap();
    assert_eq!(job["request"]["door"], "anthropic-messages", "{job}");
}

async fn a_streamed_message_speaks_anthropics_events_and_replays_them(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut body = hello();
    body["stream"] = true.into();
    let response = post(&gw, "stream-1", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let seen = events(&text);
    let names: Vec<&str> = seen.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"], "{text}");
    assert_eq!(names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"], "{text}");
    for (name, data) in &seen {
        assert_eq!(data["type"], name.as_str(), "each event names its type twice: {text}");
    }
    let streamed: String = seen
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| data["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(!streamed.is_empty(), "{text}");
    let delta = &seen[seen.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");

    let replay = post(&gw, "stream-1", &body).await.text().await.unwrap();
    assert_eq!(replay, text, "the replayed stream is the live one byte for byte");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
}

fn weather_tool() -> Value {
    json!([{"name": "get_weather", "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

async fn a_forced_tool_call_and_its_round_trip(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let ask = json!({"role": "user", "content": "Weather in Utrecht?"});
    let body = json!({"model": "tools", "max_tokens": 64, "tools": weather_tool(),
        "tool_choice": {"type": "tool", "name": "get_weather"}, "messages": [ask]});
    let message: Value = post(&gw, "tool-1", &body).await.json().await.unwrap();
    assert_eq!(message["stop_reason"], "tool_use", "{message}");
    let call =
        message["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").unwrap().clone();
    assert_eq!(call["name"], "get_weather");
    assert!(call["input"]["city"].is_string(), "{call}");

    let round_trip = json!({"model": "tools", "max_tokens": 64, "tools": weather_tool(), "messages": [
        ask,
        {"role": "assistant", "content": [call.clone()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "Sunny, 21 °C"}]},
    ]});
    let response = post(&gw, "tool-2", &round_trip).await;
    assert_eq!(response.status(), 200);
    let job_id = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let upstream = gw.sim().last_request(&job_id).unwrap().body.unwrap();
    let messages = upstream["messages"].as_array().unwrap();
    assert_eq!(messages[1]["tool_calls"][0]["id"], call["id"], "{upstream}");
    assert_eq!(messages[2], json!({"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 °C"}));
    assert_eq!(gw.sim().calls().total, 2, "one upstream call per job");
}

async fn a_key_reused_with_another_body_or_door_is_refused_in_anthropics_shape(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    assert_eq!(post(&gw, "reused", &hello()).await.status(), 200);
    let mut other = hello();
    other["max_tokens"] = 65.into();
    let refused = post(&gw, "reused", &other).await;
    assert_eq!(refused.status(), 409);
    assert_eq!(refused.headers()["content-type"], "application/json");
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["problem_type"].as_str().unwrap().ends_with("/idempotency-key-reused"), "{error}");
    assert!(error["job_id"].is_string());

    // The same conversation through chat completions is another intent.
    let chat = json!({"model": "chat", "max_tokens": 64, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]});
    let through_chat = gw.chat_completion("reused", &chat).await;
    assert_eq!(through_chat.status(), 409);
    assert_eq!(gw.sim().calls().total, 1, "neither refusal reached a provider");
}

async fn a_failover_from_anthropic_to_openai_is_invisible(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(
            doc,
            "chat",
            "chain",
            toml::Value::Array(vec!["sim-fallback".into(), "sim-primary".into()]),
        );
        set_provider(doc, "sim-fallback", "model", "sim:status=500");
    })
    .await;
    let response = post(&gw, "failover", &hello()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-primary");
    assert_eq!(response.headers()["x-intentgate-attempt"], "2");
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["content"][0]["type"], "text");
    let calls = gw.sim().calls();
    assert_eq!(calls.by_path.get("/v1/messages").copied(), Some(1), "{calls:?}");
    assert_eq!(calls.by_path.get("/v1/chat/completions").copied(), Some(1), "{calls:?}");
}

async fn bad_requests_and_keys_get_anthropics_errors(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut no_limit = hello();
    no_limit.as_object_mut().unwrap().remove("max_tokens");
    let response = post(&gw, "bad-1", &no_limit).await;
    assert_eq!(response.status(), 422);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["path"], "/max_tokens", "{error}");

    let mut nowhere = hello();
    nowhere["model"] = "nowhere-1".into();
    let missing = post(&gw, "bad-0", &nowhere).await;
    assert_eq!(missing.status(), 404);
    let error: Value = missing.json().await.unwrap();
    assert_eq!(error["error"]["type"], "not_found_error", "Anthropic's own type: {error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("`nowhere-1`"), "{error}");

    let mut typed = hello();
    typed["messages"] = "hi".into();
    let error: Value = post(&gw, "bad-00", &typed).await.json().await.unwrap();
    assert_eq!(error["error"]["message"], "`messages` must be an array of turns, not a string", "{error}");

    let mut wrong = hello();
    wrong["messages"][0]["content"] = json!([{"type": "text"}]);
    let error: Value = post(&gw, "bad-2", &wrong).await.json().await.unwrap();
    assert_eq!(error["path"], "/messages/0/content/0", "the block at fault is named: {error}");

    let unknown = gw
        .client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "not-a-key")
        .header("idempotency-key", "bad-3")
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 401);
    let error: Value = unknown.json().await.unwrap();
    assert_eq!(error["error"]["type"], "authentication_error", "{error}");

    let both = gw
        .client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", ALICE)
        .bearer_auth(ALICE)
        .header("idempotency-key", "bad-4")
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(both.status(), 401, "two keys are one too many");
    assert_eq!(gw.sim().calls().total, 0, "no refusal reached a provider");
    assert_eq!(gw.job_count().await, 0, "and none stored a job");
}
