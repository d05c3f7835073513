//! What goes over the wire: both dialects round-trip, unknown fields pass
//! through, the job identity travels downstream (R10), and the simulator's
//! controls and counters work — over real loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use intentgate_providers::sim::CallCounts;
use intentgate_providers::{CallContext, ChatRequest, Dialect, Failure, Message, Provider, Secret, Usage};
use serde_json::{Value, json};
use tokio::sync::Barrier;
use uuid::Uuid;

#[tokio::test]
async fn both_dialects_round_trip() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let response = provider(&sim, dialect, "model-x").chat(&hello(), &ctx()).await.unwrap();
        assert_eq!(response.text, "echo: hello there");
        assert_eq!(response.usage, Some(Usage { prompt_tokens: 4, completion_tokens: 3 }));
        assert_eq!(response.finish_reason.as_deref(), Some("stop"), "{dialect}: normalised");
        assert_eq!(response.model.as_deref(), Some("model-x"));
        // `raw` is the provider's exact body, fields we do not model included.
        let raw: Value = serde_json::from_slice(&response.raw).unwrap();
        let native = match dialect {
            Dialect::OpenAi => "system_fingerprint",
            Dialect::OpenAiResponses => "output",
            _ => "stop_sequence",
        };
        assert!(raw.get(native).is_some(), "{dialect}: {raw}");
    }
}

#[tokio::test]
async fn both_dialects_stream() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let mut req = hello();
        req.extra.insert("stream_options".into(), json!({"include_usage": true}));
        let (chunks, failure) = drain(&provider(&sim, dialect, "model-x"), &req, &ctx()).await.unwrap();
        assert_eq!(failure, None, "{dialect}: a stream with its terminator is complete");
        assert!(chunks.len() > 3, "{dialect}: streamed in pieces");
        assert_eq!(chunks.iter().map(|c| c.delta.as_str()).collect::<String>(), "echo: hello there");
        assert_eq!(
            chunks.iter().rev().find_map(|c| c.usage),
            Some(Usage { prompt_tokens: 4, completion_tokens: 3 })
        );
        assert_eq!(chunks.iter().find_map(|c| c.finish_reason.clone()).as_deref(), Some("stop"));
        for chunk in &chunks {
            serde_json::from_slice::<Value>(&chunk.raw).expect("raw is the exact JSON data payload");
        }
    }
}

#[tokio::test]
async fn unknown_fields_pass_through_and_the_configured_model_wins() {
    let sim = sim().await;
    let request: ChatRequest = serde_json::from_value(json!({
        "model": "what-the-caller-asked",
        "messages": [
            {"role": "system", "content": "answer in JSON"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"}
        ],
        "top_k": 40,
        "chat_template_kwargs": {"enable_thinking": false},
        "response_format": {"type": "json_object"},
        "temperature": 0.2
    }))
    .unwrap();
    // The Responses API refuses a field it does not know, and has no
    // participant names (the unit tests of src/responses/request.rs and src/sim/responses.rs).
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let ctx = ctx();
        provider(&sim, dialect, "configured").chat(&request, &ctx).await.unwrap();
        let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
        assert_eq!(sent["model"], "configured");
        assert_eq!(sent["top_k"], 40);
        assert_eq!(sent["chat_template_kwargs"], json!({"enable_thinking": false}));
        assert_eq!(sent["response_format"], json!({"type": "json_object"}));
        assert_eq!(sent["temperature"], 0.2);
        assert!(sent.get("stream").is_none_or(|s| s == false));
        let user = json!({"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"});
        match dialect {
            Dialect::OpenAi => {
                assert_eq!(sent["messages"], json!([{"role": "system", "content": "answer in JSON"}, user]))
            }
            Dialect::Anthropic => {
                assert_eq!(sent["system"], "answer in JSON");
                assert_eq!(sent["messages"], json!([user]));
                assert_eq!(sent["max_tokens"], 1024, "Anthropic requires max_tokens");
            }
            Dialect::OpenAiResponses => {
                let developer = json!({"role": "developer", "content": "answer in JSON"});
                assert_eq!(sent["input"], json!([developer, user]));
                assert_eq!(sent["store"], false, "the gateway keeps the conversation");
            }
            Dialect::Gemini | Dialect::Bedrock | Dialect::BedrockConverse => {
                unreachable!("tests/gemini.rs, tests/bedrock.rs")
            }
        }
    }
}

#[tokio::test]
async fn job_identity_and_auth_headers_arrive() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let mut config = config(&sim, dialect, "m");
        config.api_key = Some(Secret::new("k-123"));
        let ctx = CallContext { job_id: Uuid::now_v7(), attempt: 3, expect_json: false, traceparent: None };
        Provider::new(config).unwrap().chat(&hello(), &ctx).await.unwrap();
        let headers = sim.last_request(&ctx.job_id.to_string()).unwrap().headers;
        assert_eq!(headers["idempotency-key"], ctx.job_id.to_string());
        assert_eq!(headers["x-intentgate-attempt"], "3");
        match dialect {
            Dialect::OpenAi | Dialect::OpenAiResponses => {
                assert_eq!(headers["authorization"], "Bearer k-123")
            }
            Dialect::Anthropic => {
                assert_eq!(headers["x-api-key"], "k-123");
                assert_eq!(headers["anthropic-version"], "2023-06-01");
            }
            Dialect::Gemini | Dialect::Bedrock | Dialect::BedrockConverse => {
                unreachable!("tests/gemini.rs, tests/bedrock.rs")
            }
        }
    }
}

#[tokio::test]
async fn a_json_schema_keeps_its_keys() {
    let sim = sim().await;
    let mut req = ChatRequest::new(vec![Message::user("name the capital of France")]);
    let schema =
        json!({"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}}});
    req.extra.insert(
        "response_format".into(),
        json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}),
    );
    let ctx = CallContext { expect_json: true, ..ctx() };
    for dialect in DIALECTS {
        let json = provider(&sim, dialect, "m").chat(&req, &ctx).await.unwrap().json.unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["city", "country"], "{dialect}");
    }
}

#[tokio::test]
async fn hold_and_release_order_answers_without_sleeps() {
    // R7 shape: A leaves first and is held; B leaves second and finishes
    // first; only then is A released.
    let sim = sim().await;
    let slow = Arc::new(provider(&sim, Dialect::OpenAi, "sim:hold=a"));
    let first = tokio::spawn({
        let slow = slow.clone();
        async move { slow.chat(&hello(), &ctx()).await }
    });
    sim.wait_for_calls(1).await;
    provider(&sim, Dialect::Anthropic, "fast").chat(&hello(), &ctx()).await.unwrap();
    assert!(!first.is_finished(), "A is still held");
    sim.release("a");
    first.await.unwrap().unwrap();

    // A tag released before the request arrives stays released until reset.
    sim.release("early");
    let early = provider(&sim, Dialect::OpenAi, "sim:hold=early");
    early.chat(&hello(), &ctx()).await.unwrap();
    early.chat(&hello(), &ctx()).await.unwrap();
}

#[tokio::test]
async fn admin_http_api_queues_scripts_releases_counts_and_resets() {
    let sim = sim().await;
    let http = http();
    let admin = |path: &str| format!("http://{}/sim/{path}", sim.addr());
    let queued = json!({"model": "gpt-q", "script": "status=429;retry_after=2", "times": 2}).to_string();
    let response = http
        .post(admin("scripts"))
        .header("content-type", "application/json")
        .body(queued)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let bad = json!({"script": "explode"}).to_string();
    let response = http
        .post(admin("scripts"))
        .header("content-type", "application/json")
        .body(bad)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    let provider = provider(&sim, Dialect::OpenAi, "gpt-q");
    for _ in 0..2 {
        let outcome = provider.chat(&hello(), &ctx()).await;
        assert!(matches!(outcome, Err(Failure::Rejected { status: 429, .. })), "{outcome:?}");
    }
    let ctx = ctx();
    provider.chat(&hello(), &ctx).await.unwrap();

    // Release over HTTP, before the hold is reached.
    assert_eq!(http.post(admin("release/gate")).send().await.unwrap().status(), 204);
    common::provider(&sim, Dialect::Anthropic, "sim:hold=gate").chat(&hello(), &common::ctx()).await.unwrap();

    let counts: CallCounts =
        serde_json::from_slice(&http.get(admin("calls")).send().await.unwrap().bytes().await.unwrap())
            .unwrap();
    assert_eq!(counts, sim.calls());
    assert_eq!(counts.total, 4);
    assert_eq!(counts.by_path["/v1/chat/completions"], 3);
    assert_eq!(counts.by_path["/v1/messages"], 1);
    assert_eq!(counts.by_key[&ctx.job_id.to_string()], 1);

    let recorded = http.get(admin(&format!("requests/{}", ctx.job_id))).send().await.unwrap();
    let recorded: Value = serde_json::from_slice(&recorded.bytes().await.unwrap()).unwrap();
    assert_eq!(recorded["body"]["model"], "gpt-q");

    assert_eq!(http.post(admin("reset")).send().await.unwrap().status(), 204);
    assert_eq!(sim.calls(), CallCounts::default());
    assert!(sim.last_request(&ctx.job_id.to_string()).is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn counts_are_exact_under_100_concurrent_requests() {
    let sim = sim().await;
    // Every request holds at the simulator, so all 100 are in flight at once.
    let providers = Arc::new([
        provider(&sim, Dialect::OpenAi, "sim:hold=go"),
        provider(&sim, Dialect::Anthropic, "sim:hold=go"),
    ]);
    let keys: Vec<Uuid> = (0..10).map(|_| Uuid::now_v7()).collect();
    let barrier = Arc::new(Barrier::new(100));
    let mut tasks = Vec::new();
    for i in 0..100u32 {
        let (providers, barrier, job_id) = (providers.clone(), barrier.clone(), keys[i as usize % 10]);
        tasks.push(tokio::spawn(async move {
            let ctx = CallContext { job_id, attempt: i / 10 + 1, expect_json: false, traceparent: None };
            barrier.wait().await;
            providers[i as usize % 2].chat(&hello(), &ctx).await
        }));
    }
    sim.wait_for_calls(100).await;
    let counts = sim.calls();
    assert_eq!(counts.total, 100);
    assert_eq!(counts.by_path["/v1/chat/completions"], 50);
    assert_eq!(counts.by_path["/v1/messages"], 50);
    assert_eq!(counts.by_key.len(), 10);
    assert!(counts.by_key.values().all(|&n| n == 10), "{:?}", counts.by_key);
    sim.release("go");
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(sim.calls(), counts, "nothing was retried or duplicated");
}
