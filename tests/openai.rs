//! The OpenAI-compatible endpoint over real HTTP, on both stores: byte-for-
//! byte replay, duplicates that wait for (or attach to) the running job,
//! unknown outcomes as errors, and streams that fail over only before their
//! first byte.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{ALICE, TestGateway, TestStore, assert_problem, set_provider, set_route};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::Barrier;

store_matrix!(
    the_answering_model_is_named_in_the_body_and_every_chunk,
    a_route_alias_is_the_route_under_another_name,
    completion_and_byte_identical_replay,
    errors_are_problems_the_sdks_do_not_retry,
    unknown_outcome_is_an_error_not_a_hang,
    duplicate_waits_for_the_running_job,
    duplicate_gives_up_with_retry_after,
    stream_and_byte_identical_replay,
    concurrent_stream_duplicates_share_one_upstream_stream,
    stream_cut_midway_is_an_in_band_error_without_failover,
    stream_fails_over_before_the_first_byte,
    a_minted_key_job_with_an_unknown_outcome_is_never_run_again,
    a_minted_key_stream_whose_outcome_is_unknown_is_told_the_job_ended,
);

/// A client that sent no key (the door minted one) and got 409
/// `outcome-unknown` can never come back for the job's result: once the
/// attempt is abandoned at `max_execution` the chain does not resume on the
/// fallback (that would pay for a second execution nobody can read). The
/// job ends failed with code `outcome-unknown`; a late answer could still
/// have been recorded.
/// A route's alias (`gpt-4o-mini` for `chat`) is listed as a model and
/// names the same route: a request under the alias and one under the name
/// are the same intent, one job and one upstream call.
async fn a_route_alias_is_the_route_under_another_name(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(doc, "chat", "aliases", toml::Value::Array(vec!["gpt-4o-mini".into()]));
    })
    .await;
    let models: Value = gw.get(ALICE, "/v1/models").await.json().await.unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert!(ids.contains(&"gpt-4o-mini") && ids.contains(&"chat"), "{ids:?}");
    assert_eq!(gw.get(ALICE, "/v1/models/gpt-4o-mini").await.status(), 200);
    let messages = json!([{"role": "user", "content": "alias"}]);
    let aliased = gw.chat_completion("alias-1", &json!({"model": "gpt-4o-mini", "messages": messages})).await;
    assert_eq!(aliased.status(), 200);
    let job = aliased.headers()["x-intentgate-job-id"].clone();
    let named = gw.chat_completion("alias-1", &json!({"model": "chat", "messages": messages})).await;
    assert_eq!(named.headers()["x-intentgate-job-id"], job, "the same intent");
    assert_eq!(named.headers()["idempotent-replayed"], "true");
    assert_eq!(gw.sim().calls().total, 1);
}

async fn a_minted_key_job_with_an_unknown_outcome_is_never_run_again(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_provider(doc, "sim-primary", "max_execution", "300ms");
        set_route(doc, "chat", "attempt_timeout", "100ms");
        let mut openai = toml::Table::new();
        openai.insert("mint_idempotency_keys".into(), true.into());
        doc.insert("openai".into(), openai.into());
    })
    .await;
    let mut events = gw.events();
    let response = gw.request(reqwest::Method::POST, "/v1/chat/completions", ALICE).json(&chat("x", false));
    let problem = assert_problem(response.send().await.unwrap(), 409, "outcome-unknown").await;
    let job_id = problem["job_id"].as_str().unwrap().to_owned();
    common::wait_for_attempt(&mut events, &job_id, 1, intentgate::jobs::AttemptState::Abandoned).await;
    let job = common::settled_job(&gw, ALICE, &job_id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error"]["code"], "outcome-unknown", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "never run again: {job}");
    assert_eq!(gw.sim().calls().total, 1, "one execution");
}

/// A streamed request under a minted key whose provider goes silent before
/// its first byte: the job ends (no client could collect a second
/// execution), and the door says so — it answers from the job's final
/// state, never from a state between (`unknown`, "blocked until settled").
async fn a_minted_key_stream_whose_outcome_is_unknown_is_told_the_job_ended(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_route(doc, "chat", "attempt_timeout", "100ms");
        set_route(doc, "chat", "keyless", "mint");
    })
    .await;
    for n in 0..3 {
        let response = gw
            .request(reqwest::Method::POST, "/v1/chat/completions", ALICE)
            .json(&chat(&format!("s{n}"), true));
        let problem = assert_problem(response.send().await.unwrap(), 409, "outcome-unknown").await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("the job has ended"),
            "the job's final state, not a state between: {problem}"
        );
        let job_id = problem["job_id"].as_str().unwrap();
        let job: Value = gw.get(ALICE, &format!("/v1/jobs/{job_id}")).await.json().await.unwrap();
        assert_eq!(
            (job["status"].as_str(), job["error"]["code"].as_str()),
            (Some("failed"), Some("outcome-unknown"))
        );
    }
    assert_eq!(gw.sim().calls().total, 3, "one execution each, none re-sent");
}

fn chat(text: &str, stream: bool) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": text}], "stream": stream, "top_k": 3})
}

async fn post(gw: &TestGateway, key: &str, body: &Value) -> reqwest::Response {
    gw.chat_completion(key, body).await
}

/// `model` names the model that answered, as OpenAI names the resolved
/// one: the fallback's when the primary failed, in a plain body and in
/// every chunk of a translated stream (whose first event alone names it),
/// and the same in its replay.
async fn the_answering_model_is_named_in_the_body_and_every_chunk(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        common::set_provider(doc, "sim-fallback", "model", "sim:delay=1ms");
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "status=503", 2).unwrap(); // the primary fails both requests
    let plain: Value = post(&gw, "m-plain", &chat("which model?", false)).await.json().await.unwrap();
    assert_eq!(plain["model"], "sim:delay=1ms", "{plain}");

    let streamed = post(&gw, "m-stream", &chat("which model?", true)).await.text().await.unwrap();
    let models: Vec<Value> = streamed
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .map(|chunk| chunk["model"].clone())
        .collect();
    assert!(models.len() > 2 && models.iter().all(|m| m == "sim:delay=1ms"), "{models:?}");
    let replay = post(&gw, "m-stream", &chat("which model?", true)).await.text().await.unwrap();
    assert_eq!(replay, streamed, "the replay names the same model");
    assert_eq!(gw.sim().calls().total, 4, "two failed primaries, two fallbacks, no call for the replay");
}

async fn completion_and_byte_identical_replay(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first = post(&gw, "c-1", &chat("hello", false)).await;
    assert_eq!(first.status(), 200);
    let job_id = first.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    assert_eq!(first.headers()["x-intentgate-attempt"], "1");
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_bytes = first.bytes().await.unwrap();
    let body: Value = serde_json::from_slice(&first_bytes).unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "sim:ok", "the model that answered, as OpenAI names the resolved model");
    assert_eq!(body["choices"][0]["message"]["content"], "echo: hello");
    assert_eq!(body["id"], format!("chatcmpl-{}", job_id.replace('-', "")));

    let again = post(&gw, "c-1", &chat("hello", false)).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.headers()["x-intentgate-job-id"].to_str().unwrap(), job_id);
    assert_eq!(again.bytes().await.unwrap(), first_bytes, "replayed byte for byte");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
    // Vendor fields pass through to the provider.
    let seen = gw.sim().last_request(&job_id).unwrap();
    assert_eq!(seen.body.unwrap()["top_k"], 3);

    let models: Value = gw.get(ALICE, "/v1/models").await.json().await.unwrap();
    let ids: Vec<_> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"chat") && ids.contains(&"extract"), "{ids:?}");
}

async fn errors_are_problems_the_sdks_do_not_retry(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "keyless", "refuse")).await;
    let no_key =
        gw.request(Method::POST, "/v1/chat/completions", ALICE).json(&chat("x", false)).send().await.unwrap();
    assert_problem(no_key, 400, "idempotency-key-missing").await;
    assert_eq!(post(&gw, "k", &chat("one", false)).await.status(), 200);
    let reused = post(&gw, "k", &chat("two", false)).await;
    assert_eq!(reused.headers()["x-should-retry"], "false");
    assert_problem(reused, 409, "idempotency-key-reused").await;
    // Streaming is how the answer is delivered, not what is asked: the
    // streamed twin is the same intent, replayed as a stream.
    let streamed_twin = post(&gw, "k", &chat("one", true)).await;
    assert_eq!(streamed_twin.status(), 200);
    assert_eq!(streamed_twin.headers()["idempotent-replayed"], "true");
    assert_eq!(streamed_twin.headers()["content-type"], "text/event-stream");
    let unknown_model =
        post(&gw, "m", &json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]})).await;
    let missing = assert_problem(unknown_model, 404, "model-not-found").await;
    assert_eq!(missing["error"]["code"], "model_not_found", "OpenAI's own code: {missing}");
    let message = missing["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`nope`") && message.contains("`chat`") && message.contains("aliases"),
        "{message}"
    );
    assert_eq!(gw.sim().calls().total, 1);
}

async fn unknown_outcome_is_an_error_not_a_hang(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    for stream in [false, true] {
        let response = post(&gw, &format!("u-{stream}"), &chat("x", stream)).await;
        assert_eq!(response.headers()["x-should-retry"], "false");
        let problem = assert_problem(response, 409, "outcome-unknown").await;
        assert!(problem["job_id"].is_string());
        assert!(problem["attempt_id"].is_string());
        assert_eq!(problem["error"]["code"], "outcome-unknown");
    }
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages"), None, "no fallback after an unknown");
}

async fn duplicate_waits_for_the_running_job(store: TestStore) {
    let gw = Arc::new(
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "model", "sim:hold=slow"))
            .await,
    );
    let barrier = Arc::new(Barrier::new(3));
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let (gw, barrier) = (gw.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response = post(&gw, "slow", &chat("wait for me", false)).await;
                (response.status().as_u16(), response.bytes().await.unwrap())
            })
        })
        .collect();
    barrier.wait().await;
    gw.sim().wait_for_calls(1).await;
    gw.sim().release("slow");
    let mut bodies = Vec::new();
    for task in tasks {
        let (status, bytes) = task.await.unwrap();
        assert_eq!(status, 200);
        bodies.push(bytes);
    }
    assert_eq!(bodies[0], bodies[1], "both got the same completion");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
}

async fn duplicate_gives_up_with_retry_after(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hold=never");
        doc.insert("openai".into(), toml::Value::Table(toml::toml! { wait = "200ms" }));
    })
    .await;
    let response = post(&gw, "busy", &chat("x", false)).await;
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(response.headers().get("x-should-retry").is_none(), "this one is worth retrying");
    assert_problem(response, 409, "job-in-progress").await;
}

/// Parses an SSE body into its `data:` payloads.
fn data_lines(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: ").map(str::to_owned))
        .collect()
}

async fn stream_and_byte_identical_replay(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let first = post(&gw, "s-1", &chat("stream me please", true)).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    assert_eq!(first.headers()["x-intentgate-attempt"], "1");
    let first_bytes = first.bytes().await.unwrap();
    let events = data_lines(&first_bytes);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "echo: stream me please");

    let replay = post(&gw, "s-1", &chat("stream me please", true)).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap(), first_bytes, "the replayed stream is byte-identical");
    assert_eq!(gw.sim().calls().total, 1);
}

async fn concurrent_stream_duplicates_share_one_upstream_stream(store: TestStore) {
    const READERS: usize = 5;
    let gw = Arc::new(
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "model", "sim:hold=go"))
            .await,
    );
    let barrier = Arc::new(Barrier::new(READERS + 1));
    let tasks: Vec<_> = (0..READERS)
        .map(|_| {
            let (gw, barrier) = (gw.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response = post(&gw, "shared-stream", &chat("one stream for all", true)).await;
                assert_eq!(response.status(), 200);
                response.bytes().await.unwrap()
            })
        })
        .collect();
    barrier.wait().await;
    gw.sim().wait_for_calls(1).await;
    gw.sim().release("go");
    let mut streams = Vec::new();
    for task in tasks {
        streams.push(task.await.unwrap());
    }
    assert!(streams.iter().all(|s| *s == streams[0]), "identical streams");
    assert_eq!(data_lines(&streams[0]).last().unwrap(), "[DONE]");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
    let replay = post(&gw, "shared-stream", &chat("one stream for all", true)).await.bytes().await.unwrap();
    assert_eq!(replay, streams[0], "and the replay matches the live stream");
}

/// A stream cut after chunks reached the client: an in-band error, the
/// attempt `unknown`, and the job ends at once (no other provider may
/// answer a stream the client read part of): not even once the attempt is
/// abandoned at `max_execution` does the chain resume on the fallback.
async fn stream_cut_midway_is_an_in_band_error_without_failover(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:stream-cut");
        set_provider(doc, "sim-primary", "max_execution", "300ms");
    })
    .await;
    let mut events_rx = gw.events();
    let response = post(&gw, "cut", &chat("a long answer that will be cut", true)).await;
    assert_eq!(response.status(), 200, "the stream had begun");
    let job_id = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let events = data_lines(&response.bytes().await.unwrap());
    assert_ne!(events.last().unwrap(), "[DONE]", "never a clean-looking end");
    let error: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "outcome-unknown");
    assert!(events.len() >= 3, "some content arrived before the cut: {events:?}");
    common::wait_for_attempt(&mut events_rx, &job_id, 1, intentgate::jobs::AttemptState::Abandoned).await;
    let job = common::settled_job(&gw, ALICE, &job_id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error"]["code"], "outcome-unknown", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no failover after the first byte");
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages"), None);
}

async fn stream_fails_over_before_the_first_byte(store: TestStore) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "base_url", dead)).await;
    let response = post(&gw, "fo", &chat("fail over", true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-attempt"], "2", "the fallback's stream");
    let events = data_lines(&response.bytes().await.unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages").copied(), Some(1));
}
