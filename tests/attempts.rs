//! Driving jobs through real providers (the simulator over loopback): R4–R8.
//! Every scenario runs on SQLite and PostgreSQL and counts the upstream
//! calls at the simulator. Times are scaled down to milliseconds; orderings
//! are forced with the simulator's hold/release and the engine's events, not
//! with sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{
    ADMIN, ALICE, TestGateway, TestStore, assert_problem, chat_body, set_provider, set_route, settled_job,
    wait_for_attempt,
};
use intentgate::jobs::AttemptState;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::Barrier;

store_matrix!(
    a_job_runs_once_on_its_primary,
    double_click_makes_one_upstream_call,
    conflicting_reuse_makes_no_upstream_call,
    timeout_is_unknown_and_blocks_until_resolved,
    reverse_order_first_to_finish_wins,
    late_answer_of_an_abandoned_attempt_can_still_win,
    rejection_fails_over_at_once,
    refused_connection_fails_over_at_once,
    a_passing_5xx_is_retried_on_the_same_provider,
    a_persistent_5xx_fails_over_after_its_retries,
    a_refused_connection_is_retried_then_fails_over,
    a_failing_primary_is_passed_over_while_it_cools_down_then_probed_back,
    a_provider_whose_window_cannot_hold_the_prompt_is_passed_over,
    a_content_refusal_ends_the_job_unless_the_route_fails_over,
    too_many_requests_is_retried_after_retry_after,
    exhausted_chain_fails_with_every_reason,
    cancel_stops_a_job,
    cancel_of_a_succeeded_job_is_a_conflict,
    outage_resolves_every_unknown_attempt_of_a_provider,
    max_execution_abandons_an_unknown_attempt,
);

async fn create_id(gw: &TestGateway, key: &str, body: &Value) -> String {
    let response = gw.create(ALICE, key, body).await;
    assert_eq!(response.status(), 201);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

async fn resolve(gw: &TestGateway, job_id: &str, number: i32, resolution: &str) -> reqwest::Response {
    gw.request(Method::POST, &format!("/v1/jobs/{job_id}/attempts/{number}/resolve"), ADMIN)
        .json(&json!({"as": resolution, "reason": "provider support confirmed no charge"}))
        .send()
        .await
        .unwrap()
}

async fn a_job_runs_once_on_its_primary(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let response = gw
        .request(Method::POST, "/v1/jobs", ALICE)
        .header("idempotency-key", "hello")
        .header("prefer", "wait=10")
        .json(&chat_body("hello there"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["preference-applied"], "wait=10");
    let job: Value = response.json().await.unwrap();
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["version"], 1, "the version rose once, for the result");
    assert_eq!(job["result"]["provider"], "sim-primary");
    assert!(job["result"]["text"].as_str().unwrap().contains("hello there"));
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["state"], "succeeded");
    assert_eq!(attempts[0]["job_version"], 0);
    assert_eq!(job["completed_by"], attempts[0]["id"]);

    // R10: the job identity travelled downstream.
    let id = job["id"].as_str().unwrap();
    assert_eq!(gw.sim().calls().total, 1, "exactly one upstream call");
    let seen = gw.sim().last_request(id).expect("the provider saw Idempotency-Key = job id");
    let attempt_header = seen.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("x-intentgate-attempt"));
    assert_eq!(attempt_header.map(|(_, v)| v.as_str()), Some("1"));
}

/// R8a with execution: 50 concurrent same-key POSTs → one job, one upstream call.
async fn double_click_makes_one_upstream_call(store: TestStore) {
    const CLICKS: usize = 50;
    let gw = Arc::new(TestGateway::start(&store).await);
    let barrier = Arc::new(Barrier::new(CLICKS));
    let tasks: Vec<_> = (0..CLICKS)
        .map(|_| {
            let (gw, barrier) = (gw.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response = gw.create(ALICE, "pay-invoice-7", &chat_body("pay invoice 7")).await;
                let job: Value = response.json().await.unwrap();
                job["id"].as_str().unwrap().to_owned()
            })
        })
        .collect();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    assert!(ids.iter().all(|id| *id == ids[0]));
    let job = settled_job(&gw, ALICE, &ids[0]).await;
    assert_eq!(job["status"], "succeeded");
    assert_eq!(gw.job_count().await, 1);
    assert_eq!(gw.sim().calls().total, 1, "exactly one upstream call");
    assert_eq!(gw.sim().calls().by_key.get(&ids[0]).copied(), Some(1));
}

/// R8b: same key, different input → 409, and no upstream call for it.
async fn conflicting_reuse_makes_no_upstream_call(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let id = create_id(&gw, "k", &chat_body("one")).await;
    settled_job(&gw, ALICE, &id).await;
    assert_problem(gw.create(ALICE, "k", &chat_body("two")).await, 409, "idempotency-key-reused").await;
    assert_eq!(gw.sim().calls().total, 1, "only the first job's call");
}

/// R8c / R5: the primary hangs → attempt and job `unknown`, not failed; a new
/// attempt is refused; after an operator resolves it, the fallback runs.
async fn timeout_is_unknown_and_blocks_until_resolved(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    let mut events = gw.events();
    let id = create_id(&gw, "hangs", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "unknown", "{job}");
    assert_eq!(job["attempts"][0]["state"], "unknown");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1);

    let refused = gw.request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ALICE).send().await.unwrap();
    assert_eq!(refused.headers()["x-should-retry"], "false");
    let problem = assert_problem(refused, 409, "outcome-unknown").await;
    assert_eq!(problem["attempt_id"], job["attempts"][0]["id"]);
    let not_admin = gw
        .request(Method::POST, &format!("/v1/jobs/{id}/attempts/1/resolve"), ALICE)
        .json(&json!({"as": "abandoned", "reason": "x"}))
        .send()
        .await
        .unwrap();
    assert_problem(not_admin, 403, "forbidden").await;

    let resolved = resolve(&gw, &id, 1, "abandoned").await;
    assert_eq!(resolved.status(), 200);
    wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    assert_eq!(job["attempts"][0]["state"], "abandoned");
    assert_eq!(job["attempts"][0]["resolved_by"], "admin");
    // The audit trail keeps why it became unknown beside how it was settled.
    let detail = job["attempts"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("attempt_timeout"), "the original reason is kept: {detail}");
    assert!(
        detail.contains("then:") && detail.contains("confirmed no charge"),
        "the settlement is added: {detail}"
    );
    let calls = gw.sim().calls();
    assert_eq!(calls.by_path.get("/v1/chat/completions").copied(), Some(1), "primary called once");
    assert_eq!(calls.by_path.get("/v1/messages").copied(), Some(1), "fallback called once");
}

/// R8d / R7: A (primary) is slow, declared unknown and abandoned; B (the
/// fallback) starts later and answers first → B wins; A's late answer is
/// `superseded`, kept on A, never merged.
async fn reverse_order_first_to_finish_wins(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hold=slow-a");
        set_provider(doc, "sim-fallback", "model", "sim:hold=fast-b");
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    let mut events = gw.events();
    let id = create_id(&gw, "race", &chat_body("race")).await;
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    assert_eq!(resolve(&gw, &id, 1, "abandoned").await.status(), 200);
    gw.sim().wait_for_calls(2).await; // B's request reached the provider

    gw.sim().release("fast-b");
    wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    gw.sim().release("slow-a");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;

    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded");
    assert_eq!(job["result"]["provider"], "sim-fallback", "the job's result is B's");
    assert_eq!(job["completed_by"], job["attempts"][1]["id"]);
    assert_eq!(job["version"], 1, "the version rose once, for the result");
    assert_eq!(job["attempts"][0]["state"], "superseded");
    assert_eq!(gw.sim().calls().total, 2);
    let stored = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    let late = gw.gateway.store.attempt_response(stored[0].id).await.unwrap();
    assert!(late.is_some(), "A's late payload stays on A for audit");
}

/// R7, the opposite order: A's late answer arrives before B's → A wins even
/// though it was declared unknown and abandoned; B is superseded.
async fn late_answer_of_an_abandoned_attempt_can_still_win(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hold=slow-a");
        set_provider(doc, "sim-fallback", "model", "sim:hold=fast-b");
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    let mut events = gw.events();
    let id = create_id(&gw, "race-2", &chat_body("race")).await;
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    assert_eq!(resolve(&gw, &id, 1, "abandoned").await.status(), 200);
    gw.sim().wait_for_calls(2).await;

    gw.sim().release("slow-a");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Succeeded).await;
    gw.sim().release("fast-b");
    wait_for_attempt(&mut events, &id, 2, AttemptState::Superseded).await;

    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["result"]["provider"], "sim-primary", "the first to finish wins");
    assert_eq!(job["completed_by"], job["attempts"][0]["id"]);
    assert_eq!(job["version"], 1);
    assert_eq!(job["attempts"][1]["state"], "superseded");
}

/// A status outside the route's retry classes (the harness keeps only 429)
/// fails over at once.
async fn rejection_fails_over_at_once(store: TestStore) {
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "model", "sim:status=503"))
            .await;
    let id = create_id(&gw, "503", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    assert_eq!(job["attempts"][0]["state"], "failed");
    assert_eq!(job["attempts"][0]["outcome"], "rejected");
    assert_eq!(
        gw.sim().calls().by_path.get("/v1/chat/completions").copied(),
        Some(1),
        "outside the classes: not retried"
    );
}

async fn refused_connection_fails_over_at_once(store: TestStore) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "base_url", dead)).await;
    let id = create_id(&gw, "refused", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded");
    assert_eq!(job["attempts"][0]["outcome"], "not_sent");
    assert_eq!(job["attempts"][0]["state"], "failed");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    assert_eq!(gw.sim().calls().total, 1, "only the fallback was reached");
}

/// The shipped retry classes, with a short backoff so the test is quick.
fn default_retries_fast(doc: &mut toml::Table) {
    common::with_default_retry_classes(doc);
    common::set_route(doc, "chat", "retry_backoff", "10ms");
}

/// A 500, 502, 503 or 529 once, then healthy: the same provider answers on
/// its retry; the fallback is never called (two calls per job, both at the
/// primary).
async fn a_passing_5xx_is_retried_on_the_same_provider(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, default_retries_fast).await;
    for status in [500, 502, 503, 529] {
        gw.sim().queue(Some("sim:ok"), &format!("status={status}"), 1).unwrap();
        let id = create_id(&gw, &format!("hiccup-{status}"), &chat_body("x")).await;
        let job = settled_job(&gw, ALICE, &id).await;
        assert_eq!(job["status"], "succeeded", "{status}: {job}");
        let attempts = job["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{status}: {job}");
        assert_eq!(attempts[0]["outcome"], "rejected");
        assert!(attempts.iter().all(|a| a["provider"] == "sim-primary"), "{status}: {job}");
    }
    let calls = gw.sim().calls();
    assert_eq!(calls.by_path.get("/v1/chat/completions").copied(), Some(8), "two calls per job");
    assert_eq!(calls.by_path.get("/v1/messages").copied(), None, "the fallback was never needed");
}

/// A provider that keeps answering 503 gets the route's `retries` (2) and
/// then the chain fails over: three calls at the primary, one at the fallback.
async fn a_persistent_5xx_fails_over_after_its_retries(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        default_retries_fast(doc);
        set_provider(doc, "sim-primary", "model", "sim:status=503");
    })
    .await;
    let id = create_id(&gw, "down", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 4, "{job}");
    let calls = gw.sim().calls();
    assert_eq!(calls.by_path.get("/v1/chat/completions").copied(), Some(3));
    assert_eq!(calls.by_path.get("/v1/messages").copied(), Some(1));
}

/// A refused connection provably sent nothing: it is retried (the request
/// never left, so a retry cannot run it twice), then the chain fails over.
async fn a_refused_connection_is_retried_then_fails_over(store: TestStore) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let gw = TestGateway::start_tweaked(&store, |doc| {
        default_retries_fast(doc);
        set_provider(doc, "sim-primary", "base_url", dead);
    })
    .await;
    let id = create_id(&gw, "refused", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 4, "{job}");
    assert!(attempts[..3].iter().all(|a| a["outcome"] == "not_sent" && a["provider"] == "sim-primary"));
    assert_eq!(job["result"]["provider"], "sim-fallback");
    assert_eq!(gw.sim().calls().total, 1, "only the fallback was reached");
}

/// Provider health: after `failures` proven failures in a row the primary
/// is passed over for its cool-down (no call reaches it, the fallback
/// serves at once), then one request probes it, and its answer puts it back
/// first. Twenty requests: three reach the dead primary, not twenty.
async fn a_failing_primary_is_passed_over_while_it_cools_down_then_probed_back(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        // Its own model name, so a queued script reaches it and not the fallback.
        set_provider(doc, "sim-primary", "model", "sim:delay=0");
        let mut health = toml::Table::new();
        health.insert("failures".into(), 3.into());
        health.insert("cooldown".into(), "60s".into());
        set_provider(doc, "sim-primary", "health", health);
    })
    .await;
    gw.sim().queue(Some("sim:delay=0"), "status=503", 3).unwrap();
    let served_by = |response: &reqwest::Response| {
        response.headers()["x-intentgate-provider"].to_str().unwrap().to_owned()
    };
    for i in 0..20 {
        let response = gw
            .chat_completion(
                &format!("down-{i}"),
                &json!({"model": "chat", "messages": [{"role": "user", "content": "x"}]}),
            )
            .await;
        assert_eq!(response.status(), 200, "request {i}");
        assert_eq!(served_by(&response), "sim-fallback", "request {i}");
    }
    let calls = gw.sim().calls();
    assert_eq!(
        calls.by_path.get("/v1/chat/completions").copied(),
        Some(3),
        "the primary stopped being tried"
    );
    assert_eq!(calls.by_path.get("/v1/messages").copied(), Some(20));
    let metrics = gw.get(ALICE, "/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"intentgate_provider_unhealthy{provider="sim-primary"} 1"#), "{metrics}");

    // The cool-down passes (the engine's clock, not a sleep): one probe,
    // which the primary, healthy again, answers; it serves first again.
    gw.gateway.engine.clock().advance(std::time::Duration::from_secs(61));
    // A duplicate first: it is answered from the store and sends nothing,
    // so it gives the probe back rather than holding it for a cool-down.
    let replay = gw
        .chat_completion("down-0", &json!({"model": "chat", "messages": [{"role": "user", "content": "x"}]}))
        .await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(gw.sim().calls().total, 23, "a replay calls no provider");
    for i in 0..3 {
        let response = gw
            .chat_completion(
                &format!("back-{i}"),
                &json!({"model": "chat", "messages": [{"role": "user", "content": "x"}]}),
            )
            .await;
        assert_eq!(served_by(&response), "sim-primary", "request {i} after the cool-down");
    }
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages").copied(), Some(20), "the fallback rests");
    let metrics = gw.get(ALICE, "/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"intentgate_provider_unhealthy{provider="sim-primary"} 0"#), "{metrics}");
}

/// A provider whose `context_window` cannot hold the prompt (counted with
/// its tokenizer) is passed over before anything is sent, where it would
/// only answer `context_length_exceeded`; the next provider serves. A
/// prompt that fits goes to the primary as before.
async fn a_provider_whose_window_cannot_hold_the_prompt_is_passed_over(store: TestStore) {
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "context_window", 200))
            .await;
    let long = "many words ".repeat(300);
    let id = create_id(&gw, "too-long", &chat_body(&long)).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job}");
    assert_eq!(job["attempts"][0]["provider"], "sim-fallback");
    assert_eq!(
        gw.sim().calls().by_path.get("/v1/chat/completions").copied(),
        None,
        "never sent to the primary"
    );
    let short = create_id(&gw, "short", &chat_body("hi")).await;
    let job = settled_job(&gw, ALICE, &short).await;
    assert_eq!(job["attempts"][0]["provider"], "sim-primary", "{job}");
}

/// A provider's content-policy refusal (a 400 saying so) ends the job with
/// its reason, in the door's shape: the next provider is not shopped for a
/// laxer policy (one call in all). A route with
/// `fail_over_content_refusals` fails over instead.
async fn a_content_refusal_ends_the_job_unless_the_route_fails_over(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:content-policy")
    })
    .await;
    let id = create_id(&gw, "refused-content", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error"]["code"], "content-refused", "{job}");
    assert!(job["error"]["reason"].as_str().unwrap().contains("content policy"), "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no failover: {job}");
    let chat = json!({"model": "chat", "messages": [{"role": "user", "content": "y"}]});
    let problem =
        assert_problem(gw.chat_completion("refused-chat", &chat).await, 400, "content-refused").await;
    assert!(problem["error"]["message"].is_string(), "{problem}");
    assert_eq!(gw.sim().calls().total, 2, "one call per request, none at the fallback");

    let opted = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:content-policy");
        set_route(doc, "chat", "fail_over_content_refusals", true);
    })
    .await;
    let id = create_id(&opted, "shops-on", &chat_body("x")).await;
    let job = settled_job(&opted, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback");
}

async fn too_many_requests_is_retried_after_retry_after(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    // The next call for model `sim:ok` (the primary's; the fallback is called
    // only after it) gets a 429, then the model behaves.
    gw.sim().queue(Some("sim:ok"), "status=429;retry_after=1", 1).unwrap();
    let id = create_id(&gw, "429", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        (attempts[0]["provider"].as_str(), attempts[0]["outcome"].as_str()),
        (Some("sim-primary"), Some("rejected"))
    );
    assert_eq!(attempts[1]["provider"], "sim-primary", "retried on the same provider");
    assert_eq!(job["result"]["provider"], "sim-primary");
    let stored = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    let waited = stored[1].started_at_ms - stored[0].finished_at_ms.unwrap();
    assert!(waited >= 1000, "Retry-After: 1 honoured, waited {waited} ms");
    assert_eq!(gw.sim().calls().total, 2);
}

async fn exhausted_chain_fails_with_every_reason(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:status=500");
        set_provider(doc, "sim-fallback", "model", "sim:malformed-json");
    })
    .await;
    let id = create_id(&gw, "doomed", &chat_body("x")).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "failed", "{job}");
    let reasons = job["error"]["attempts"].as_array().unwrap();
    assert_eq!(reasons.len(), 2);
    assert_eq!(reasons[0]["outcome"], "rejected");
    assert_eq!(reasons[1]["outcome"], "bad_output");
    assert_eq!(gw.sim().calls().total, 2);

    // A failed job may be tried again by hand: a new pass from the primary.
    let again = gw.request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ALICE).send().await.unwrap();
    assert_eq!(again.status(), 202);
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 4);
    assert_eq!(job["attempts"][2]["provider"], "sim-primary");
}

async fn cancel_stops_a_job(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hold=cancelled");
    })
    .await;
    let mut events = gw.events();
    let id = create_id(&gw, "cancel-me", &chat_body("x")).await;
    gw.sim().wait_for_calls(1).await;
    let cancelled = gw.request(Method::POST, &format!("/v1/jobs/{id}/cancel"), ALICE).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
    gw.sim().release("cancelled");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "cancelled", "a late answer does not complete a cancelled job");
    assert!(job["result"].is_null());
    let again = gw.request(Method::POST, &format!("/v1/jobs/{id}/cancel"), ALICE).send().await.unwrap();
    assert_eq!(again.status(), 200, "cancelling a cancelled job is idempotent");
    let attempt = gw.request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ALICE).send().await.unwrap();
    assert_problem(attempt, 409, "job-completed").await;
}

async fn cancel_of_a_succeeded_job_is_a_conflict(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let id = create_id(&gw, "done", &chat_body("x")).await;
    assert_eq!(settled_job(&gw, ALICE, &id).await["status"], "succeeded");
    let cancel = gw.request(Method::POST, &format!("/v1/jobs/{id}/cancel"), ALICE).send().await.unwrap();
    assert_problem(cancel, 409, "job-completed").await;
    let attempt = gw.request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ALICE).send().await.unwrap();
    assert_problem(attempt, 409, "job-completed").await;
    assert_eq!(gw.sim().calls().total, 1);
}

/// An outage: one admin call settles every unknown attempt of a provider,
/// and each job goes on to its fallback.
async fn outage_resolves_every_unknown_attempt_of_a_provider(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_route(doc, "chat", "attempt_timeout", "50ms");
    })
    .await;
    let mut events = gw.events();
    let a = create_id(&gw, "outage-a", &chat_body("a")).await;
    let b = create_id(&gw, "outage-b", &chat_body("b")).await;
    wait_for_attempt(&mut events, &a, 1, AttemptState::Unknown).await;
    assert_eq!(settled_job(&gw, ALICE, &b).await["status"], "unknown");
    let response = gw
        .request(Method::POST, "/v1/providers/sim-primary/resolve", ADMIN)
        .json(&json!({"as": "failed", "reason": "status page: requests never processed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["resolved"].as_array().unwrap().len(), 2);
    for id in [&a, &b] {
        let job = settled_job(&gw, ALICE, id).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        assert_eq!(job["attempts"][0]["state"], "failed");
        assert_eq!(job["result"]["provider"], "sim-fallback");
    }
}

/// Past the provider's `max_execution` with no answer, the provider can no
/// longer be working: the unknown attempt is abandoned automatically and the
/// chain goes on. (Without `max_execution`, only an operator settles it: see
/// `timeout_is_unknown_and_blocks_until_resolved`.)
async fn max_execution_abandons_an_unknown_attempt(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_provider(doc, "sim-primary", "max_execution", "300ms");
        set_route(doc, "chat", "attempt_timeout", "50ms");
    })
    .await;
    let mut events = gw.events();
    let id = create_id(&gw, "overdue", &chat_body("x")).await;
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    wait_for_attempt(&mut events, &id, 1, AttemptState::Abandoned).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"][0]["state"], "abandoned");
    assert_eq!(job["attempts"][0]["resolved_by"], "max_execution");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    let stored = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    let waited = stored[0].finished_at_ms.unwrap() - stored[0].started_at_ms;
    assert!(waited >= 300, "abandoned only after max_execution, after {waited} ms");
}
