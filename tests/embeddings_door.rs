//! The OpenAI embeddings door (`POST /v1/embeddings`) over real HTTP,
//! against the simulator on loopback, on both stores: one job and one
//! upstream call per key with a byte-for-byte replay, a reused key with
//! another input refused, the same intent through the jobs API, failover
//! past an Anthropic-dialect provider (which has no embeddings) without
//! calling it, and OpenAI-shaped refusals of what OpenAI would refuse.
//! Upstream calls are counted at the simulator, per path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    an_embedding_is_one_job_and_replays_byte_for_byte,
    a_provider_without_embeddings_is_passed_over_unsent,
    an_embeddings_job_through_the_jobs_api,
    what_openai_refuses_is_refused_before_anything_is_stored,
);

async fn post(gw: &TestGateway, key: &str, body: &Value) -> Response {
    gw.post_door("/v1/embeddings", key, body).await
}

fn norm(vector: &Value) -> f64 {
    vector.as_array().unwrap().iter().map(|x| x.as_f64().unwrap().powi(2)).sum::<f64>().sqrt()
}

async fn an_embedding_is_one_job_and_replays_byte_for_byte(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let body = json!({"model": "embeddings", "input": ["a red fox", "a lazy dog"], "dimensions": 8});
    let first = post(&gw, "e-1", &body).await;
    assert_eq!(first.status(), 200);
    let job = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let bytes = first.bytes().await.unwrap();
    let list: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(list["object"], "list", "{list}");
    assert_eq!(list["model"], "sim:ok", "the model that answered");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[0]["embedding"].as_array().unwrap().len(), 8);
    assert!((norm(&data[0]["embedding"]) - 1.0).abs() < 1e-4);
    assert!(list["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    let again = post(&gw, "e-1", &body).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.unwrap(), bytes, "a replay is the same bytes");

    let other = json!({"model": "embeddings", "input": "something else"});
    let reused = post(&gw, "e-1", &other).await;
    let problem = common::assert_problem(reused, 409, "idempotency-key-reused").await;
    assert_eq!(problem["job_id"], job.as_str());

    let calls = gw.sim().calls();
    assert_eq!(calls.total, 1, "one upstream call for three requests");
    assert_eq!(calls.by_path.get("/v1/embeddings"), Some(&1));
    let job = common::settled_job(&gw, ALICE, &job).await;
    assert_eq!(job["request"]["door"], "openai-embeddings", "{job}");
}

async fn a_provider_without_embeddings_is_passed_over_unsent(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        common::set_route(
            doc,
            "embeddings",
            "chain",
            toml::Value::Array(vec!["sim-fallback".into(), "sim-primary".into()]),
        );
    })
    .await;
    let response = post(&gw, "e-skip", &json!({"model": "embeddings", "input": "hello"})).await;
    assert_eq!(response.status(), 200);
    let job = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let job = common::settled_job(&gw, ALICE, &job).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{job}");
    assert_eq!(attempts[0]["provider"], "sim-primary");
    let calls = gw.sim().calls();
    assert_eq!(
        (calls.total, calls.by_path.get("/v1/messages")),
        (1, None),
        "the Anthropic one was never called"
    );
}

async fn an_embeddings_job_through_the_jobs_api(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let body =
        json!({"route": "embeddings", "input": {"embed": "hello"}, "params": {"encoding_format": "base64"}});
    let created = gw.create(ALICE, "e-job", &body).await;
    assert_eq!(created.status(), 201);
    let job: Value = created.json().await.unwrap();
    let job = common::settled_job(&gw, ALICE, job["id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let vector = &job["result"]["completion"]["data"][0]["embedding"];
    assert_eq!(vector.as_str().map(str::len), Some(88), "16 floats in base64: {job}");
    assert_eq!(gw.sim().calls().total, 1);

    let both = json!({"route": "embeddings", "input": {"embed": "x", "messages": [{"role": "user", "content": "x"}]}});
    common::assert_problem(gw.create(ALICE, "e-both", &both).await, 422, "invalid-body").await;
    let chat_param = json!({"route": "embeddings", "input": {"embed": "x"}, "params": {"temperature": 0}});
    let problem =
        common::assert_problem(gw.create(ALICE, "e-temp", &chat_param).await, 422, "invalid-body").await;
    assert_eq!(problem["path"], "/params/temperature");
    assert_eq!(gw.job_count().await, 1);
}

async fn what_openai_refuses_is_refused_before_anything_is_stored(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    for (body, path) in [
        (json!({"model": "embeddings", "input": "a", "stream": true}), "/stream"),
        (json!({"model": "embeddings", "input": []}), "/input"),
        (json!({"model": "embeddings", "input": "a", "encoding_format": "hex"}), "/encoding_format"),
    ] {
        let response = post(&gw, &format!("e-bad-{path}"), &body).await;
        let problem = common::assert_problem(response, 422, "invalid-body").await;
        assert_eq!(problem["path"], path, "{problem}");
        assert_eq!(problem["error"]["type"], "invalid_request_error", "OpenAI's error member: {problem}");
    }
    assert_eq!(gw.job_count().await, 0);
    assert_eq!(gw.sim().calls().total, 0);
}
