//! Per-provider request overrides and the temperature cap reach the
//! provider on every kind of call, in both dialects, over real loopback
//! sockets: what the simulator received is what was configured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use intentgate_providers::{ChatRequest, Provider};
use serde_json::{Value, json};

fn overridden(
    sim: &intentgate_providers::sim::SimHandle,
    dialect: intentgate_providers::Dialect,
) -> Provider {
    let mut config = config(sim, dialect, "model-x");
    config.request_overrides = json!({
        "response_format": {"type": "json_object", "schema": {"type": "object"}},
        "seed": 7,
        "model": "ignored: the configured model stays",
        "stream": "ignored: the adapter decides",
    })
    .as_object()
    .cloned()
    .unwrap();
    config.max_temperature = Some(0.2);
    Provider::new(config).unwrap()
}

fn caller_request() -> ChatRequest {
    let mut request = hello();
    request.temperature = Some(0.9);
    request.extra.insert(
        "response_format".into(),
        json!({"type": "json_schema", "json_schema": {"name": "caller", "schema": {}}}),
    );
    request.extra.insert("top_k".into(), json!(3));
    request
}

fn assert_overridden(body: &Value, stream: bool) {
    assert_eq!(
        body["response_format"],
        json!({"type": "json_object", "schema": {"type": "object"}}),
        "{body}"
    );
    assert_eq!(body["seed"], 7, "{body}");
    assert_eq!(body["temperature"], 0.2, "the cap lowered the caller's 0.9: {body}");
    assert_eq!(body["top_k"], 3, "the caller's other fields pass: {body}");
    assert_eq!(body["model"], "model-x", "{body}");
    assert_eq!(body.get("stream").cloned().unwrap_or(Value::Bool(false)), Value::Bool(stream), "{body}");
}

#[tokio::test]
async fn overrides_reach_the_provider_on_calls_and_streams_in_both_dialects() {
    let sim = sim().await;
    // Overrides are written in the dialect's own terms: these are chat's
    // (the Responses API has no `response_format`, no `seed`).
    for dialect in [intentgate_providers::Dialect::OpenAi, intentgate_providers::Dialect::Anthropic] {
        let provider = overridden(&sim, dialect);
        let call = ctx();
        provider.chat(&caller_request(), &call).await.unwrap();
        let seen = sim.last_request(&call.job_id.to_string()).unwrap();
        assert_overridden(seen.body.as_ref().unwrap(), false);

        let streamed = ctx();
        let (_, failure) = drain(&provider, &caller_request(), &streamed).await.unwrap();
        assert_eq!(failure, None, "{dialect}");
        let seen = sim.last_request(&streamed.job_id.to_string()).unwrap();
        assert_overridden(seen.body.as_ref().unwrap(), true);
    }
}

#[tokio::test]
async fn without_overrides_the_caller_s_request_is_sent_as_it_is() {
    let sim = sim().await;
    let provider = provider(&sim, intentgate_providers::Dialect::OpenAi, "model-x");
    let call = ctx();
    provider.chat(&caller_request(), &call).await.unwrap();
    let body = sim.last_request(&call.job_id.to_string()).unwrap().body.unwrap();
    assert_eq!(body["temperature"], 0.9);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert!(body.get("seed").is_none());
}
