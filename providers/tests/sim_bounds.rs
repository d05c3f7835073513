//! The simulator's memory is bounded and it keeps prompts only when asked:
//! its admin routes are unauthenticated, and the shipped demo runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use intentgate_providers::Dialect;
use intentgate_providers::sim::{RECORDED_REQUESTS, Simulator};
use serde_json::{Value, json};

async fn recorded(sim: &intentgate_providers::sim::SimHandle, key: &str) -> (u16, Value) {
    let response = http().get(format!("http://{}/sim/requests/{key}", sim.addr())).send().await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null))
}

#[tokio::test]
async fn bodies_are_not_recorded_unless_asked() {
    let sim = Simulator::new(1).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let ctx = ctx();
    provider(&sim, Dialect::OpenAi, "model-x").chat(&hello(), &ctx).await.unwrap();
    let key = ctx.job_id.to_string();
    let seen = sim.last_request(&key).unwrap();
    assert_eq!(seen.path, "/v1/chat/completions");
    assert!(seen.body.is_none(), "the prompt was kept: {:?}", seen.body);
    let (status, body) = recorded(&sim, &key).await;
    assert_eq!(status, 200);
    assert_eq!(body["path"], "/v1/chat/completions");
    assert_eq!(body["body"], Value::Null, "{body}");
    assert!(!body.to_string().contains("hello there"), "{body}");

    let sim = Simulator::new(1).record_bodies(true).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    provider(&sim, Dialect::OpenAi, "model-x").chat(&hello(), &ctx).await.unwrap();
    let (_, body) = recorded(&sim, &key).await;
    assert_eq!(body["body"]["model"], "model-x", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recordings_are_a_ring_of_the_most_recent_requests() {
    let sim = Simulator::new(1).record_bodies(true).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = http();
    let url = format!("{}/chat/completions", sim.base_url_openai());
    let total = RECORDED_REQUESTS + 100;
    for i in 0..total {
        let response = client
            .post(&url)
            .header("idempotency-key", format!("key-{i}"))
            .header("content-type", "application/json")
            .body(
                json!({"model": "m", "messages": [{"role": "user", "content": format!("prompt {i}")}]})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(sim.calls().total, total as u64);
    assert_eq!(sim.recorded_requests(), RECORDED_REQUESTS, "the ring is bounded");
    assert!(sim.last_request("key-0").is_none(), "the oldest was forgotten");
    assert!(sim.last_request(&format!("key-{}", total - 1)).unwrap().body.is_some());
    assert_eq!(recorded(&sim, "key-99").await.0, 404);
    assert_eq!(recorded(&sim, "key-100").await.0, 200);

    sim.reset();
    assert_eq!(sim.recorded_requests(), 0);
}

/// The simulator's port, which needs no key, reads a body no further than
/// its limit and answers a provider's 413 in the dialect's shape (and
/// Bedrock's) past it; a body within it is answered.
#[tokio::test]
async fn a_body_past_the_simulators_limit_is_refused_unread() {
    let sim = Simulator::new(1).max_body_bytes(4096).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = http();
    let body =
        |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]}).to_string();
    let post = |url: String, body: String| {
        client.post(url).header("content-type", "application/json").body(body).send()
    };
    let openai = format!("{}/chat/completions", sim.base_url_openai());
    assert_eq!(post(openai.clone(), body("small")).await.unwrap().status(), 200);
    let refused = post(openai, body(&"x".repeat(5000))).await.unwrap();
    assert_eq!(refused.status(), 413);
    let problem: Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert!(problem["error"]["message"].as_str().unwrap().contains("4096 bytes"), "{problem}");
    let bedrock = format!("http://{}/model/m/invoke", sim.addr());
    assert_eq!(post(bedrock, body(&"x".repeat(5000))).await.unwrap().status(), 413);
}

/// A large stream's room in the answer budget is held while it is read
/// and, once it ended whole, by whoever keeps its answer: it is given back
/// when that is dropped, not when the stream is.
#[tokio::test]
async fn a_streams_room_outlives_the_stream_until_its_answer_is_dropped() {
    let sim = Simulator::new(1).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let budget = intentgate_providers::AnswerBudget::new(64 * 1024 * 1024);
    let mut config = config(&sim, Dialect::OpenAi, "sim:ok");
    config.answer_budget = budget.clone();
    let provider = intentgate_providers::Provider::new(config).unwrap();
    let long = intentgate_providers::ChatRequest::new(vec![intentgate_providers::Message::user(
        "a long answer ".repeat(20_000),
    )]);
    let mut stream = provider.chat_stream(&long, &ctx()).await.unwrap();
    drop(stream.take_room()); // nothing to hand over before its end
    while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
        item.unwrap();
    }
    let held = budget.held_bytes();
    assert!(held > 0, "a 280 KB stream takes room");
    let room = stream.take_room();
    drop(stream);
    assert_eq!(budget.held_bytes(), held, "the answer holds it now");
    drop(room);
    assert_eq!(budget.held_bytes(), 0, "given back with the answer");
}
