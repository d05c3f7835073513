//! A Responses request passed through: a provider of the Responses dialect
//! is sent what the client sent (Codex's reasoning settings, custom tools,
//! cache key, encrypted reasoning items) with only the model changed, and
//! answers in its own words under the gateway's response id; reasoning
//! items it sealed come back to it unchanged, also through
//! `previous_response_id`; a chat provider is passed over for what its
//! translation cannot hold, with the reason. Counted at the simulator, on
//! both stores.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, set_route};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    a_codex_turn_reaches_a_responses_provider_as_sent,
    sealed_reasoning_goes_back_unchanged_and_an_altered_one_is_refused,
    previous_response_id_carries_the_reasoning_to_a_responses_provider,
    a_codex_turn_passes_a_chat_provider_over_with_the_reason,
);

/// Codex CLI 0.171's first turn of `codex exec`, as it sent it to this
/// gateway: function, namespace and web search tools, a reasoning summary
/// and its encrypted content asked for, nothing stored upstream, a prompt
/// cache key, its client metadata.
fn codex_turn() -> Value {
    serde_json::from_str(include_str!("bodies/codex_turn.json")).unwrap()
}

/// The Codex turn asking the model to reason (Codex sends an effort when
/// it knows the model).
fn reasoning_turn() -> Value {
    let mut turn = codex_turn();
    turn["reasoning"]["effort"] = "medium".into();
    turn["stream"] = false.into();
    turn
}

async fn post(gw: &TestGateway, key: &str, body: &Value) -> Response {
    gw.client
        .post(gw.url("/v1/responses"))
        .bearer_auth(ALICE)
        .header("openai-beta", "responses=experimental")
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn a_codex_turn_reaches_a_responses_provider_as_sent(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let sent = codex_turn();
    let first = post(&gw, "codex-1", &sent).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-intentgate-provider"], "sim-responses");
    let job = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let answer = first.text().await.unwrap();

    let seen = gw.sim().last_request(&job).unwrap();
    let mut expected = sent.clone();
    expected["model"] = "sim:ok".into();
    assert_eq!(seen.body.unwrap(), expected, "byte-identical but for the provider's model");
    assert_eq!(seen.headers["openai-beta"], "responses=experimental", "the beta header is carried");

    let events = events(&answer);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{answer}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{answer}");
    let done = &events.last().unwrap()["response"];
    assert_eq!(done["id"], format!("resp_{}", job.replace('-', "")), "the gateway's response id");
    assert_eq!(done["output"][0]["type"], "function_call", "the simulator calls Codex's first tool: {done}");
    assert!(
        done["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0,
        "the cache key reached it"
    );

    let replay = post(&gw, "codex-1", &sent).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), answer, "replayed byte for byte");

    let mut other = sent.clone();
    other["reasoning"]["effort"] = "high".into();
    assert_eq!(
        post(&gw, "codex-1", &other).await.status(),
        409,
        "another reasoning effort is another intent"
    );
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
    assert_eq!(gw.job_count().await, 1);
}

async fn sealed_reasoning_goes_back_unchanged_and_an_altered_one_is_refused(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first = post(&gw, "seal-1", &reasoning_turn()).await;
    assert_eq!(first.status(), 200);
    let response: Value = first.json().await.unwrap();
    let reasoning = &response["output"][0];
    assert_eq!(reasoning["type"], "reasoning", "{response}");
    assert!(reasoning["encrypted_content"].is_string(), "the provider's encrypted reasoning: {response}");
    assert!(response["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64().unwrap() > 0);

    let mut next = reasoning_turn();
    let mut input = next["input"].as_array().unwrap().clone();
    let at = input.len();
    input.extend(response["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"role": "user", "content": "and the timeouts?"}));
    next["input"] = input.into();
    let second = post(&gw, "seal-2", &next).await;
    assert_eq!(second.status(), 200, "the simulator verified the reasoning it sealed");

    let mut altered = next.clone();
    let sealed = altered["input"][at]["encrypted_content"].as_str().unwrap().to_owned();
    altered["input"][at]["encrypted_content"] = format!("{sealed}x").into();
    let refused = post(&gw, "seal-3", &altered).await;
    assert_ne!(refused.status(), 200);
    let problem = refused.text().await.unwrap();
    assert!(problem.contains("could not be verified"), "the provider's reason reaches the client: {problem}");
    assert_eq!(gw.sim().calls().total, 3);
}

async fn previous_response_id_carries_the_reasoning_to_a_responses_provider(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut turn = reasoning_turn();
    turn["store"] = true.into();
    let asked = turn["input"].as_array().unwrap().len();
    let first: Value = post(&gw, "prev-1", &turn).await.json().await.unwrap();
    let next = json!({"model": "codex", "previous_response_id": first["id"],
        "input": "and the timeouts?", "reasoning": {"effort": "medium"}, "store": true,
        "include": ["reasoning.encrypted_content"]});
    let second = post(&gw, "prev-2", &next).await;
    assert_eq!(second.status(), 200, "{:?}", second.text().await);
    let job = second.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let seen = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert!(seen.get("previous_response_id").is_none(), "the provider knows no response of the gateway");
    let input = seen["input"].as_array().unwrap();
    assert_eq!(input.len(), asked + 2 + 1, "the first turn's input, its output, the new message: {seen}");
    assert_eq!(input[asked], first["output"][0], "the reasoning item as the provider sealed it");
    assert_eq!(input[asked + 2], json!({"role": "user", "content": "and the timeouts?"}));
}

async fn a_codex_turn_passes_a_chat_provider_over_with_the_reason(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(doc, "codex", "chain", toml::Value::Array(vec!["sim-primary".into()]));
    })
    .await;
    let mut turn = codex_turn();
    turn["stream"] = false.into();
    let problem: Value = post(&gw, "chat-1", &turn).await.json().await.unwrap();
    let message = problem["error"]["message"].as_str().unwrap();
    for named in ["sim-primary", "`namespace` tools", "`web_search` tools"] {
        assert!(message.contains(named), "the message the client prints names {named}: {message}");
    }
    assert_eq!(gw.sim().calls().total, 0, "nothing was sent with a part dropped");

    // Without what only the Responses API holds, the chat view serves it.
    let functions: Vec<Value> =
        turn["tools"].as_array().unwrap().iter().filter(|t| t["type"] == "function").cloned().collect();
    turn["tools"] = functions.into();
    turn["reasoning"]["effort"] = "medium".into();
    let response = post(&gw, "chat-2", &turn).await;
    assert_eq!(response.status(), 200);
    let job = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let seen = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(seen["reasoning_effort"], "medium", "the effort is translated");
    assert!(seen.get("prompt_cache_key").is_none(), "a hint is left out of the translation");
}
