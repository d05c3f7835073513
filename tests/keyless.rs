//! Requests that carry no `Idempotency-Key` (what the official SDKs send):
//! a route refuses them, mints a key (every request a new job), or derives
//! one from the caller and the canonical request within `keyless_window`,
//! so a client's retry of the same request is the same job while a
//! different request — an agent's next step — is a new one. Counts jobs and
//! upstream calls; the window passes on the engine's clock, not in a sleep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, BOB, TestGateway, TestStore, assert_problem, job_of, set_route};
use reqwest::Response;
use serde_json::{Value, json};

store_matrix!(
    a_derived_key_makes_a_retry_the_same_job_and_a_new_request_a_new_one,
    a_route_refuses_or_mints_as_it_says,
    the_shipped_config_derives_a_key_bound_to_the_caller,
    a_plain_retry_of_a_cut_stream_is_the_same_job,
    a_streamed_retry_of_a_plain_request_replays_it_as_a_stream,
    each_door_reads_its_own_section,
    each_job_names_the_door_it_came_through,
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
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(doc, "chat", "keyless", "mint");
        set_route(doc, "extract", "keyless", "refuse");
    })
    .await;
    let refused =
        assert_problem(keyless_on(&gw, "extract", "refused").await, 400, "idempotency-key-missing").await;
    let detail = refused["detail"].as_str().unwrap();
    assert!(
        detail.contains("keyless = \"derive\"") && detail.contains("`extract`"),
        "names the way out: {detail}"
    );
    assert_eq!(gw.job_count().await, 0, "a refusal stores nothing");
    for _ in 0..2 {
        assert_eq!(keyless(&gw, "minted").await.status(), 200);
    }
    assert_eq!(gw.job_count().await, 2, "a minted key deduplicates nothing");
}

/// No config change: a keyless request through a compatible door is
/// deduplicated under a key derived from the caller and the request, so
/// the same body from another caller is another job.
async fn the_shipped_config_derives_a_key_bound_to_the_caller(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first = keyless(&gw, "same words").await;
    assert_eq!(first.status(), 200);
    let job = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let retry = keyless(&gw, "same words").await;
    assert_eq!(retry.headers()["x-intentgate-job-id"], job.as_str(), "an SDK's retry is the same job");

    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "same words"}]});
    let bob =
        gw.client.post(gw.url("/v1/chat/completions")).bearer_auth(BOB).json(&body).send().await.unwrap();
    assert_eq!(bob.status(), 200);
    assert_ne!(bob.headers()["x-intentgate-job-id"], job.as_str(), "another caller's request is its own job");
    assert_eq!(gw.job_count().await, 2);
    assert_eq!(gw.sim().calls().total, 2, "one upstream call per job");
}

async fn messages(gw: &TestGateway, stream: bool) -> Response {
    let body = json!({"model": "chat", "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": "read the file"}]});
    let request = gw.client.post(gw.url("/v1/messages")).header("x-api-key", ALICE);
    request.header("anthropic-version", "2023-06-01").json(&body).send().await.unwrap()
}

/// Claude Code re-sends a request whose stream broke as a plain one: the
/// stream flag is how the answer is delivered, not part of the intent, so
/// the retry is answered from the job and the provider is called once.
async fn a_plain_retry_of_a_cut_stream_is_the_same_job(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut streamed = messages(&gw, true).await;
    assert_eq!(streamed.status(), 200);
    let job = streamed.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    assert!(streamed.chunk().await.unwrap().is_some(), "the stream began");
    drop(streamed);

    let plain = messages(&gw, false).await;
    assert_eq!(plain.status(), 200);
    assert_eq!(plain.headers()["x-intentgate-job-id"], job.as_str(), "the plain retry is the streamed job");
    assert_eq!(plain.headers()["idempotent-replayed"], "true");
    let answer: Value = plain.json().await.unwrap();
    assert_eq!(answer["type"], "message", "{answer}");
    assert_eq!(gw.job_count().await, 1);
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
}

/// The other way round: a plain job asked again as a stream is replayed as
/// the door's stream, from the stored answer.
async fn a_streamed_retry_of_a_plain_request_replays_it_as_a_stream(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let plain = messages(&gw, false).await;
    assert_eq!(plain.status(), 200);
    let job = plain.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let streamed = messages(&gw, true).await;
    assert_eq!(streamed.headers()["x-intentgate-job-id"], job.as_str());
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    let text = streamed.text().await.unwrap();
    assert!(text.contains("event: message_start") && text.contains("event: message_stop"), "{text}");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
}

/// `[openai] mint_idempotency_keys` governs the OpenAI doors only: the
/// Messages door reads `[anthropic]`, so its keyless retry is still the
/// same job while chat completions mint a key for each request.
async fn each_door_reads_its_own_section(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let mut openai = toml::Table::new();
        openai.insert("mint_idempotency_keys".into(), true.into());
        doc.insert("openai".into(), toml::Value::Table(openai));
    })
    .await;
    for _ in 0..2 {
        assert_eq!(keyless(&gw, "minted").await.status(), 200);
    }
    assert_eq!(gw.job_count().await, 2, "chat completions mint, as [openai] says");
    let first = messages(&gw, false).await;
    assert_eq!(first.status(), 200);
    let retry = messages(&gw, false).await;
    assert_eq!(retry.headers()["x-intentgate-job-id"], first.headers()["x-intentgate-job-id"]);
    assert_eq!(gw.job_count().await, 3, "Messages derive, as [anthropic] (unset) says");
}

/// The job view (and so the console) names the door a job came through,
/// for every door; the door is not part of the intent, so the same key
/// and request through another door is the same job, its first door kept.
async fn each_job_names_the_door_it_came_through(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let door_of = async |job: &str| -> Value {
        let view: Value = gw.get(ALICE, &format!("/v1/jobs/{job}")).await.json().await.unwrap();
        view["entered_through"].clone()
    };
    let chat = keyless(&gw, "which door?").await;
    assert_eq!(door_of(&job_of(&chat)).await, "chat-completions");
    assert_eq!(door_of(&job_of(&messages(&gw, false).await)).await, "messages");
    let responses =
        gw.post_door("/v1/responses", "door-responses", &json!({"model": "chat", "input": "hi"})).await;
    assert_eq!(door_of(&job_of(&responses)).await, "responses");
    let embeddings = gw
        .post_door("/v1/embeddings", "door-embeddings", &json!({"model": "embeddings", "input": "hi"}))
        .await;
    assert_eq!(door_of(&job_of(&embeddings)).await, "embeddings");

    let body = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "first door"}]}});
    let created: Value = gw.create(ALICE, "door-kept", &body).await.json().await.unwrap();
    let job = created["id"].as_str().unwrap();
    assert_eq!(created["entered_through"], "jobs");
    let again = json!({"model": "chat", "messages": [{"role": "user", "content": "first door"}]});
    let replay = gw.chat_completion("door-kept", &again).await;
    assert_eq!(job_of(&replay), job, "the same intent through another door");
    assert_eq!(door_of(job).await, "jobs", "the first door is kept");
}
