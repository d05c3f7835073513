//! Requests that carry no `Idempotency-Key` (what the official SDKs send):
//! a route refuses them, mints a key (every request a new job), or derives
//! one from the caller and the canonical request within `keyless_window`,
//! so a client's retry of the same request is the same job while a
//! different request — an agent's next step — is a new one. Counts jobs and
//! upstream calls; the window passes on the engine's clock, not in a sleep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, assert_problem, set_route};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    a_derived_key_makes_a_retry_the_same_job_and_a_new_request_a_new_one,
    a_route_refuses_or_mints_as_it_says,
);

async fn keyless(gw: &TestGateway, text: &str) -> Response {
    keyless_on(gw, "chat", text).await
}

async fn keyless_on(gw: &TestGateway, route: &str, text: &str) -> Response {
    let body = json!({"model": route, "messages": [{"role": "user", "content": text}]});
    gw.client.post(gw.url("/v1/chat/completions")).bearer_auth(ALICE).json(&body).send().await.unwrap()
}

async fn a_derived_key_makes_a_retry_the_same_job_and_a_new_request_a_new_one(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(doc, "chat", "keyless", "derive");
        set_route(doc, "chat", "keyless_window", "10m");
    })
    .await;
    let first = keyless(&gw, "step 1").await;
    assert_eq!(first.status(), 200);
    let job = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let first: Value = first.json().await.unwrap();

    let retry = keyless(&gw, "step 1").await;
    assert_eq!(retry.headers()["x-intentgate-job-id"], job.as_str(), "the retry is the same job");
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.json::<Value>().await.unwrap(), first);

    let next = keyless(&gw, "step 2").await;
    assert_ne!(next.headers()["x-intentgate-job-id"], job.as_str(), "another request is another job");
    assert_eq!(gw.job_count().await, 2);
    assert_eq!(gw.sim().calls().total, 2, "one upstream call per job");

    // Just past the window's boundary the job is still younger than the
    // window: found. Past the window itself: a new job.
    gw.gateway.engine.clock().advance(std::time::Duration::from_secs(9 * 60));
    let late = keyless(&gw, "step 1").await;
    assert_eq!(late.headers()["x-intentgate-job-id"], job.as_str(), "within the window");
    gw.gateway.engine.clock().advance(std::time::Duration::from_secs(20 * 60));
    let later = keyless(&gw, "step 1").await;
    assert_ne!(later.headers()["x-intentgate-job-id"], job.as_str(), "past the window, a new job");
    assert_eq!(gw.job_count().await, 3);

    // The key the job is stored under says where it came from.
    let read: Value = gw.get(ALICE, &format!("/v1/jobs/{job}")).await.json().await.unwrap();
    assert!(read["idempotency_key"].as_str().unwrap().starts_with("derived-"), "{read}");
}

async fn a_route_refuses_or_mints_as_it_says(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "keyless", "mint")).await;
    assert_problem(keyless_on(&gw, "extract", "refused").await, 400, "idempotency-key-missing").await;
    assert_eq!(gw.job_count().await, 0, "the default refuses, storing nothing");
    for _ in 0..2 {
        assert_eq!(keyless(&gw, "minted").await.status(), 200);
    }
    assert_eq!(gw.job_count().await, 2, "a minted key deduplicates nothing");
}
