//! `GET /metrics` moves as the attempts scenarios run. The recorder is
//! process-wide, so this binary holds one test that runs the scenarios one
//! after another (on both stores) and asserts exact deltas.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    ADMIN, ALICE, Backend, TestGateway, TestStore, chat_body, set_provider, set_route, wait_for_attempt,
};
use intentgate::jobs::AttemptState;
use reqwest::Method;
use serde_json::{Value, json};

/// The value of the sample `name{labels…}` (0 when absent).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.split(['{', ' ']).next() == Some(name))
        .filter(|line| labels.iter().all(|(k, v)| line.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// An admin's scrape: every series.
async fn scrape(gw: &TestGateway) -> String {
    scrape_as(gw, Some(ADMIN)).await
}

/// A scrape with `key` in `Authorization: Bearer`, or with no key.
async fn scrape_as(gw: &TestGateway, key: Option<&str>) -> String {
    let mut request = gw.client.get(gw.url("/metrics"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    response.text().await.unwrap()
}

async fn create_id(gw: &TestGateway, key: &str) -> String {
    let job: Value = gw.create(ALICE, key, &chat_body(key)).await.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_move_with_the_scenarios() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(store) = TestStore::new(backend).await else { continue };
        jobs_and_failovers(&store).await;
        race_and_unknown(&store).await;
        streams_tokens_and_limits(&store).await;
    }
}

async fn jobs_and_failovers(store: &TestStore) {
    let gw =
        TestGateway::start_tweaked(store, |doc| set_provider(doc, "sim-primary", "model", "sim:status=503"))
            .await;
    let before = scrape(&gw).await;
    // Exposed (at zero in a fresh process) before this gateway did anything.
    for series in [
        "intentgate_failovers_total{from=\"sim-primary\",to=\"sim-fallback\"} ",
        "intentgate_failovers_total{from=\"sim-fallback\",to=\"sim-sloppy\"} ",
        "intentgate_provider_tokens_total{provider=\"sim-fallback\",direction=\"output\"} ",
    ] {
        assert!(
            before.lines().any(|l| l.starts_with(series)),
            "exposed from the first scrape: {series}\n{before}"
        );
    }
    let id = create_id(&gw, "m-1").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(gw.create(ALICE, "m-1", &chat_body("m-1")).await.status(), 200);
    assert_eq!(gw.create(ALICE, "m-1", &chat_body("other")).await.status(), 409);
    let after = scrape(&gw).await;
    let delta =
        |name: &str, labels: &[(&str, &str)]| sample(&after, name, labels) - sample(&before, name, labels);
    assert_eq!(delta("intentgate_jobs_total", &[("result", "created")]), 1.0);
    assert_eq!(delta("intentgate_jobs_total", &[("result", "replayed")]), 1.0);
    assert_eq!(delta("intentgate_jobs_total", &[("result", "conflicted")]), 1.0);
    let rejected = [("provider", "sim-primary"), ("outcome", "rejected")];
    assert_eq!(delta("intentgate_attempts_total", &rejected), 1.0);
    assert_eq!(delta("intentgate_attempts_total", &[("provider", "sim-fallback"), ("outcome", "ok")]), 1.0);
    assert_eq!(delta("intentgate_failovers_total", &[("from", "sim-primary"), ("to", "sim-fallback")]), 1.0);
    let usage = &job["result"]["usage"];
    for (direction, reported) in [("input", "prompt_tokens"), ("output", "completion_tokens")] {
        let tokens = delta(
            "intentgate_provider_tokens_total",
            &[("provider", "sim-fallback"), ("direction", direction)],
        );
        assert_eq!(tokens, usage[reported].as_f64().unwrap(), "{direction} tokens as reported: {usage}");
    }
    assert!(delta("intentgate_provider_latency_seconds_count", &[("provider", "sim-fallback")]) >= 1.0);
    assert!(delta("intentgate_gateway_overhead_seconds_count", &[("path", "/v1/jobs")]) >= 3.0, "{after}");
}

async fn race_and_unknown(store: &TestStore) {
    let gw = TestGateway::start_tweaked(store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hold=late-a");
        set_provider(doc, "sim-fallback", "model", "sim:hold=fast-b");
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    let mut events = gw.events();
    let before = scrape(&gw).await;
    let unknown = |text: &str| sample(text, "intentgate_attempts_unknown", &[("provider", "sim-primary")]);
    let races = |text: &str| sample(text, "intentgate_cas_races_lost_total", &[]);
    assert_eq!(unknown(&before), 0.0);

    let id = create_id(&gw, "m-race").await;
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    assert_eq!(unknown(&scrape(&gw).await), 1.0, "an unknown attempt raises the gauge");
    let resolved = gw
        .request(Method::POST, &format!("/v1/jobs/{id}/attempts/1/resolve"), ADMIN)
        .json(&json!({"as": "abandoned", "reason": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    assert_eq!(unknown(&scrape(&gw).await), 0.0, "a resolve lowers it");

    gw.sim().wait_for_calls(2).await;
    gw.sim().release("fast-b");
    wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    gw.sim().release("late-a");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;
    assert_eq!(
        races(&scrape(&gw).await) - races(&before),
        1.0,
        "a race increments the counter by exactly one"
    );
}

/// A streamed answer records its time to first token; a budget's room left
/// in its window is a gauge read from the store.
async fn streams_tokens_and_limits(store: &TestStore) {
    let gw = TestGateway::start_tweaked(store, |doc| {
        let mut price = toml::Table::new();
        price.insert("input_per_mtok".into(), 100.0.into());
        price.insert("output_per_mtok".into(), 200.0.into());
        set_provider(doc, "sim-primary", "price", price);
        let mut budget = toml::Table::new();
        budget.insert("owner".into(), "alice".into());
        budget.insert("limit".into(), 1.0.into());
        budget.insert("window".into(), "1d".into());
        doc.insert("budgets".into(), toml::Value::Array(vec![budget.into()]));
    })
    .await;
    let before = scrape(&gw).await;
    let body =
        json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "stream me"}]});
    let streamed = gw.chat_completion("m-stream", &body).await;
    assert_eq!(streamed.status(), 200);
    assert!(streamed.text().await.unwrap().contains("[DONE]"));
    let after = scrape(&gw).await;
    let first_token = |text: &str| {
        sample(text, "intentgate_time_to_first_token_seconds_count", &[("provider", "sim-primary")])
    };
    assert_eq!(first_token(&after) - first_token(&before), 1.0);
    let usage: Value = gw.get(ALICE, "/v1/usage").await.json().await.unwrap();
    let meter = &usage["budgets"][0];
    let left = sample(&after, "intentgate_limit_remaining", &[("meter", meter["meter"].as_str().unwrap())]);
    let expected = meter["limit_nanos"].as_i64().unwrap()
        - meter["spent_nanos"].as_i64().unwrap()
        - meter["reserved_nanos"].as_i64().unwrap();
    assert!(expected < 1_000_000_000, "the stream was charged: {usage}");
    assert_eq!(left, expected as f64, "{usage}");
    owners_are_named_to_admins_only(&gw, meter["meter"].as_str().unwrap()).await;
}

/// What an owner has left names the owner: an admin's scrape has the
/// series; one without a key, or with a key that is not an admin's, has
/// neither the series nor the owner's name, and an unknown key is refused.
async fn owners_are_named_to_admins_only(gw: &TestGateway, meter: &str) {
    assert!(meter.contains("alice"), "the meter names its owner: {meter}");
    let admin = scrape_as(gw, Some(ADMIN)).await;
    assert!(admin.contains(&format!("meter=\"{meter}\"")), "{admin}");
    for key in [None, Some(ALICE)] {
        let text = scrape_as(gw, key).await;
        assert!(!text.contains("intentgate_limit_remaining"), "{key:?}: {text}");
        assert!(!text.contains("alice"), "{key:?}: {text}");
        assert!(text.contains("intentgate_jobs_total"), "{key:?}: the rest is served");
    }
    let unknown = gw.client.get(gw.url("/metrics")).bearer_auth("not-a-key").send().await.unwrap();
    assert_eq!(unknown.status(), 401);
}
