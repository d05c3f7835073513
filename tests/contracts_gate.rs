//! R9 end to end: contract runs recorded in the real stores, failover gated
//! on them, staleness, and the runtime shape check — against the simulator
//! over loopback, on SQLite and PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, set_provider, set_route, settled_job};
use intentgate::config::Config;
use intentgate::contracts::{Suite, pairs, run_and_record};
use serde_json::{Value, json};

store_matrix!(
    sloppy_provider_fails_its_suite_and_is_never_failed_over_to,
    passing_fallback_is_failed_over_to,
    a_changed_provider_or_suite_makes_the_record_stale,
    runtime_violation_fails_over_to_the_next_valid_answer,
    primary_without_a_record_is_refused,
    every_refusal_of_a_drive_is_in_the_error,
);

/// The gate on for both primary and fallbacks, as shipped.
fn gated(doc: &mut toml::Table) {
    for route in ["chat", "extract"] {
        set_route(doc, route, "require_contract_for_primary", true);
        set_route(doc, route, "require_contract_for_fallback", true);
    }
}

/// Runs every suite against its route's providers (as `contract run` does)
/// and makes the gateway read the records.
async fn contract_run(gw: &TestGateway, config: &Config) -> Vec<(String, String, bool)> {
    let suites = Suite::load_dir(&config.contracts.dir).unwrap();
    let mut results = Vec::new();
    for (suite, provider) in pairs(config, &suites, None, None) {
        let report = run_and_record(&gw.gateway.store, suite, provider, &mut |_| {}).await.unwrap();
        results.push((report.route, report.provider, report.passed));
    }
    gw.gateway.engine.gate().reload(&gw.gateway.store).await.unwrap();
    results
}

fn extract_body(text: &str) -> Value {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/contract-tests/schemas/extract.json"))
            .unwrap(),
    )
    .unwrap();
    json!({
        "route": "extract",
        "input": {"messages": [{"role": "user", "content": text}]},
        "params": {"response_format": {"type": "json_schema", "json_schema": {"name": "extract", "schema": schema}}}
    })
}

async fn start(store: &TestStore, tweak: impl FnOnce(&mut toml::Table)) -> (TestGateway, Config) {
    let mut captured = None;
    let gw = TestGateway::start_tweaked(store, |doc| {
        gated(doc);
        tweak(doc);
        captured = Some(common::config_from_doc(doc));
    })
    .await;
    (gw, captured.unwrap())
}

async fn create(gw: &TestGateway, key: &str, body: &Value) -> Value {
    let created: Value = gw.create(ALICE, key, body).await.json().await.unwrap();
    settled_job(gw, ALICE, created["id"].as_str().unwrap()).await
}

async fn sloppy_provider_fails_its_suite_and_is_never_failed_over_to(store: TestStore) {
    let (gw, config) = start(&store, |doc| {
        // extract: primary, then only the sloppy one.
        set_route(
            doc,
            "extract",
            "chain",
            toml::Value::Array(vec!["sim-primary".into(), "sim-sloppy".into()]),
        );
    })
    .await;
    let results = contract_run(&gw, &config).await;
    assert!(results.contains(&("extract".into(), "sim-sloppy".into(), false)), "{results:?}");
    assert!(results.contains(&("extract".into(), "sim-primary".into(), true)), "{results:?}");

    // Now the primary breaks; the only fallback is ineligible.
    gw.sim().queue(Some("sim:ok"), "status=503", 1).unwrap();
    let calls_before = gw.sim().calls().total;
    let job = create(&gw, "sloppy", &extract_body("Anna from Utrecht: my phone broke")).await;
    assert_eq!(job["status"], "failed", "{job}");
    let refused = job["error"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].as_str().unwrap().starts_with("sim-sloppy: failed its run"), "{refused:?}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no attempt on the sloppy provider");
    assert_eq!(gw.sim().calls().total - calls_before, 1, "only the primary was called");

    let routes: Value = gw.get(ALICE, "/v1/routes").await.json().await.unwrap();
    let extract = routes["routes"].as_array().unwrap().iter().find(|r| r["name"] == "extract").unwrap();
    assert_eq!(extract["chain"][0]["eligible"], true);
    assert_eq!(extract["chain"][1]["eligible"], false);
    assert!(extract["chain"][1]["reason"].as_str().unwrap().contains("invented"), "{extract}");
}

async fn passing_fallback_is_failed_over_to(store: TestStore) {
    let (gw, config) = start(&store, |doc| set_provider(doc, "sim-primary", "model", "sim:status=503")).await;
    contract_run(&gw, &config).await;
    // The primary fails its suite (503s), so it is refused too: the job goes
    // straight to the eligible fallback.
    let job = create(&gw, "fo", &extract_body("Bob: the router is dead")).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1);
}

async fn a_changed_provider_or_suite_makes_the_record_stale(store: TestStore) {
    let (gw, config) = start(&store, |_| {}).await;
    contract_run(&gw, &config).await;
    let ok = create(&gw, "before", &extract_body("x")).await;
    assert_eq!(ok["status"], "succeeded");

    // The same database, a gateway whose fallback's model changed: its
    // record no longer describes it. The primary 503s, so the job needs the
    // fallback, which the gate now refuses.
    let stale = TestGateway::start_tweaked(&store, |doc| {
        gated(doc);
        set_provider(doc, "sim-fallback", "model", "sim:delay=1ms");
        set_provider(doc, "sim-primary", "model", "sim:status=503");
        doc["providers"].as_array_mut().unwrap().retain(|p| p["name"].as_str() != Some("sim-sloppy"));
        set_route(
            doc,
            "extract",
            "chain",
            toml::Value::Array(vec!["sim-primary".into(), "sim-fallback".into()]),
        );
        set_route(doc, "extract", "require_contract_for_primary", false);
    })
    .await;
    let job = create(&stale, "after-model-change", &extract_body("x")).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert!(job["error"]["refused"][0].as_str().unwrap().contains("stale: the provider's"), "{job}");

    // An edited suite makes every record of its route stale.
    let dir = std::env::temp_dir().join(format!("intentgate-suites-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    let suites = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contract-tests");
    std::fs::copy(suites.join("schemas/extract.json"), dir.join("schemas/extract.json")).unwrap();
    let edited =
        std::fs::read_to_string(suites.join("extract.toml")).unwrap().replace("repeats = 2", "repeats = 3");
    std::fs::write(dir.join("extract.toml"), edited).unwrap();
    let edited_gw = TestGateway::start_tweaked(&store, |doc| {
        gated(doc);
        doc["contracts"].as_table_mut().unwrap().insert("dir".into(), dir.to_str().unwrap().into());
    })
    .await;
    let routes: Value = edited_gw.get(ALICE, "/v1/routes").await.json().await.unwrap();
    let extract = routes["routes"].as_array().unwrap().iter().find(|r| r["name"] == "extract").unwrap();
    assert!(
        extract["chain"][0]["reason"].as_str().unwrap().contains("stale: the suite changed"),
        "{extract}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An eligible provider whose live answer breaks the schema is failed over
/// from; the job ends with the next provider's valid result.
async fn runtime_violation_fails_over_to_the_next_valid_answer(store: TestStore) {
    let (gw, config) = start(&store, |_| {}).await;
    contract_run(&gw, &config).await;
    gw.sim().queue(Some("sim:ok"), "invent-key", 1).unwrap();
    let job = create(&gw, "violation", &extract_body("Carla: refund please")).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"][0]["state"], "failed");
    assert_eq!(job["attempts"][0]["outcome"], "contract_violation");
    assert!(job["attempts"][0]["detail"].as_str().unwrap().contains("invented"), "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    let answer: Value = serde_json::from_str(job["result"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer.as_object().unwrap().len(), 4, "exactly the schema's keys: {answer}");
}

async fn primary_without_a_record_is_refused(store: TestStore) {
    let (gw, _config) = start(&store, |_| {}).await;
    let job = create(
        &gw,
        "no-records",
        &json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "x"}]}}),
    )
    .await;
    assert_eq!(job["status"], "failed", "{job}");
    assert!(job["error"]["refused"][0].as_str().unwrap().contains("no recorded run"), "{job}");
    assert_eq!(gw.sim().calls().total, 0, "never a silent call to an unproven provider");
}

/// A refusal early in the chain is still reported when a later provider is
/// chosen and then fails too.
async fn every_refusal_of_a_drive_is_in_the_error(store: TestStore) {
    let (gw, config) = start(&store, |doc| {
        let chain = vec!["sim-primary".into(), "sim-sloppy".into(), "sim-fallback".into()];
        set_route(doc, "extract", "chain", toml::Value::Array(chain));
    })
    .await;
    contract_run(&gw, &config).await;
    // The primary and the fallback (both model `sim:ok`) answer 503 once each.
    gw.sim().queue(Some("sim:ok"), "status=503", 2).unwrap();
    let job = create(&gw, "all-refused", &extract_body("x")).await;
    assert_eq!(job["status"], "failed", "{job}");
    let attempts: Vec<&str> =
        job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(attempts, ["sim-primary", "sim-fallback"], "the sloppy provider was skipped");
    let refused = job["error"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{job}");
    assert!(refused[0].as_str().unwrap().starts_with("sim-sloppy:"), "{refused:?}");
}
