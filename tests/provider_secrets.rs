//! A provider that echoes its own API key in a 2xx answer: the key is not
//! stored (attempt `response`, job `result`) and not returned, through the
//! jobs API and the OpenAI-compatible endpoint — nor when a stream splits
//! it across its chunks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(
    an_echoed_provider_key_is_neither_stored_nor_returned,
    a_key_split_across_a_streams_chunks_is_neither_stored_nor_replayed
);

const KEY: &str = "sk-live-echoed-0123456789abcdef";

/// A gateway whose primary provider has `KEY` and echoes it back.
async fn echoing_gateway(store: &TestStore) -> TestGateway {
    // One variable per test run: tests in this binary run in parallel.
    let env = format!("INTENTGATE_TEST_ECHO_KEY_{}", uuid::Uuid::now_v7().simple());
    // SAFETY: a fresh, unique name nothing else reads or writes concurrently.
    unsafe { std::env::set_var(&env, KEY) };
    TestGateway::start_tweaked(store, |doc| {
        set_provider(doc, "sim-primary", "api_key_env", env.as_str());
        set_provider(doc, "sim-primary", "model", "sim:echo-auth");
    })
    .await
}

async fn an_echoed_provider_key_is_neither_stored_nor_returned(store: TestStore) {
    let gw = echoing_gateway(&store).await;

    let created = gw
        .request(Method::POST, "/v1/jobs", ALICE)
        .header("idempotency-key", "echo")
        .header("prefer", "wait=10")
        .json(&chat_body("hello"))
        .send()
        .await
        .unwrap();
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["status"], "succeeded", "{created}");
    let returned = created.to_string();
    assert!(returned.contains("[redacted]"), "the provider did echo the key: {returned}");
    assert!(!returned.contains(KEY), "returned: {returned}");
    let seen = gw.sim().last_request(created["id"].as_str().unwrap()).unwrap();
    assert!(seen.headers.values().any(|v| v.contains(KEY)), "the key did reach the provider");

    let id = created["id"].as_str().unwrap();
    let job = gw.gateway.store.job(id.parse().unwrap()).await.unwrap().unwrap();
    let attempts = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    let stored = format!("{job:?} {attempts:?}");
    assert!(!stored.contains(KEY), "stored: {stored}");

    let completion = gw
        .request(Method::POST, "/v1/chat/completions", ALICE)
        .header("idempotency-key", "echo-openai")
        .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(completion.status(), 200);
    let completion = completion.text().await.unwrap();
    assert!(!completion.contains(KEY), "returned: {completion}");
}

/// The text a stream's chunks carry, joined.
fn streamed_text(chunks: &[Value]) -> String {
    chunks.iter().filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str()).collect()
}

/// The simulator streams its echo in four pieces, so the key is cut across
/// chunks: each chunk alone holds no key (it passes live as it came), but
/// what is stored and replayed is scrubbed as a whole.
async fn a_key_split_across_a_streams_chunks_is_neither_stored_nor_replayed(store: TestStore) {
    let gw = echoing_gateway(&store).await;
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let send = || {
        gw.request(Method::POST, "/v1/chat/completions", ALICE)
            .header("idempotency-key", "split")
            .json(&body)
            .send()
    };
    let live = send().await.unwrap();
    let id: uuid::Uuid = live.headers()["x-intentgate-job-id"].to_str().unwrap().parse().unwrap();
    let live = chunks_of(&live.text().await.unwrap());
    assert!(!live.iter().any(|chunk| chunk.to_string().contains(KEY)), "no chunk holds the key whole");

    let replay = send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed = streamed_text(&chunks_of(&replay.text().await.unwrap()));
    assert!(!replayed.contains(KEY) && replayed.contains("[redacted]"), "replayed: {replayed}");

    let job = gw.gateway.store.job(id).await.unwrap().unwrap();
    let result: Value = serde_json::from_str(job.result.as_deref().unwrap()).unwrap();
    let stored = streamed_text(result["chunks"].as_array().unwrap());
    assert!(!stored.contains(KEY) && stored.contains("[redacted]"), "stored chunks: {stored}");
    let attempts = gw.gateway.store.attempts(id).await.unwrap();
    let response = gw.gateway.store.attempt_response(attempts[0].id).await.unwrap();
    assert_eq!(response, None, "stored once, in the job's result");
}
