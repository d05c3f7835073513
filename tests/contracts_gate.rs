//! R9 end to end: contract runs recorded in the real stores, failover gated
//! on them, staleness, and the runtime shape check — against the simulator
//! over loopback, on SQLite and PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, set_provider, set_route, settled_job};
use intentgate::config::Config;
use intentgate::contract_runs::run_and_record;
use intentgate::contracts::{Suite, pairs};
use serde_json::{Value, json};

store_matrix!(
    sloppy_provider_fails_its_suite_and_is_never_failed_over_to,
    passing_fallback_is_failed_over_to,
    a_changed_provider_or_suite_makes_the_record_stale,
    runtime_violation_fails_over_to_the_next_valid_answer,
    primary_without_a_record_is_refused,
    every_refusal_of_a_drive_is_in_the_error,
    tools_suite_passes_good_tool_calls_and_refuses_schema_breaking_ones,
    runtime_tool_call_violation_fails_over,
    another_replicas_runs_never_invalidate_this_ones,
    a_bedrock_model_that_breaks_the_tools_contract_is_refused_as_a_fallback,
);

/// Two gateways on one store, each with its own simulator (so each
/// provider has another base URL, another fingerprint): the second one's
/// contract runs are recorded beside the first's and replace none of them,
/// so both stay eligible on both gateways (a second `serve` in the same
/// directory once made every provider of the first stale).
async fn another_replicas_runs_never_invalidate_this_ones(store: TestStore) {
    let (a, a_config) = start(&store, |_| {}).await;
    contract_run(&a, &a_config).await;
    let (b, b_config) = start(&store, |_| {}).await;
    contract_run(&b, &b_config).await;
    a.gateway.engine.gate().reload(&a.gateway.store).await.unwrap();
    for (name, gw) in [("first", &a), ("second", &b)] {
        let routes: Value = gw.get(ALICE, "/v1/routes").await.json().await.unwrap();
        let chat = routes["routes"].as_array().unwrap().iter().find(|r| r["name"] == "chat").unwrap();
        for entry in chat["chain"].as_array().unwrap() {
            assert_eq!(entry["eligible"], true, "{name} gateway: {entry}");
        }
    }
    let job = create(
        &a,
        "still-served",
        &json!({"route": "chat",
        "input": {"messages": [{"role": "user", "content": "x"}]}}),
    )
    .await;
    assert_eq!(job["status"], "succeeded", "{job}");
}

/// A Bedrock provider (the shipped one, on the simulator) whose model calls
/// tools with arguments their schema refuses fails the `tools` suite, and
/// is never failed over to: the primary's 503 ends the job, one call made.
async fn a_bedrock_model_that_breaks_the_tools_contract_is_refused_as_a_fallback(store: TestStore) {
    let (gw, config) = start(&store, |doc| {
        let providers = doc["providers"].as_array_mut().unwrap();
        let shipped = providers.iter().find(|p| p["name"].as_str() == Some("sim-claude-bedrock")).unwrap();
        let mut bad = shipped.as_table().unwrap().clone();
        bad.insert("name".into(), "bedrock-tools-bad".into());
        bad.insert("model".into(), "sim:tool_args=bad".into());
        providers.push(bad.into());
        let chain = vec!["sim-tools".into(), "bedrock-tools-bad".into()];
        set_route(doc, "tools", "chain", toml::Value::Array(chain));
    })
    .await;
    let results = contract_run(&gw, &config).await;
    assert!(results.contains(&("tools".into(), "bedrock-tools-bad".into(), false)), "{results:?}");
    assert!(results.contains(&("tools".into(), "sim-tools".into(), true)), "{results:?}");

    gw.sim().queue(Some("sim:tool_call"), "status=503", 1).unwrap();
    let calls_before = gw.sim().calls().total;
    let job = create(&gw, "bedrock-bad", &tools_body("Weather in Bergen?")).await;
    assert_eq!(job["status"], "failed", "{job}");
    let refused = job["error"]["refused"].as_array().unwrap();
    assert!(refused[0].as_str().unwrap().starts_with("bedrock-tools-bad: failed its run"), "{refused:?}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no attempt on Bedrock");
    assert_eq!(gw.sim().calls().total - calls_before, 1, "only the primary was called");
}

/// The gate on for both primary and fallbacks, as shipped.
fn gated(doc: &mut toml::Table) {
    for route in ["chat", "extract", "tools"] {
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
        doc["routes"].as_array_mut().unwrap().retain(|r| r["name"].as_str() != Some("embeddings"));
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

/// A job on the `tools` route offering the shipped suite's `get_weather`,
/// forced by `tool_choice` — what a well-behaved client sends.
fn tools_body(text: &str) -> Value {
    let suite =
        Suite::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contract-tests/tools.toml"))
            .unwrap();
    json!({
        "route": "tools",
        "input": {"messages": [{"role": "user", "content": text}]},
        "params": {
            "tools": suite.tools().to_request(),
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}
        }
    })
}

fn called(job: &Value) -> (&str, Value) {
    let call = &job["result"]["completion"]["choices"][0]["message"]["tool_calls"][0]["function"];
    let arguments = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    (call["name"].as_str().unwrap(), arguments)
}

/// The tools suite passes the provider whose calls keep the tool's schema
/// and fails the one whose arguments break it, naming the tool and the
/// schema error; the gate then never fails over to the bad one.
async fn tools_suite_passes_good_tool_calls_and_refuses_schema_breaking_ones(store: TestStore) {
    let (gw, config) = start(&store, |doc| {
        let chain = vec!["sim-tools".into(), "sim-tools-bad".into()];
        set_route(doc, "tools", "chain", toml::Value::Array(chain));
    })
    .await;
    let results = contract_run(&gw, &config).await;
    assert!(results.contains(&("tools".into(), "sim-tools".into(), true)), "{results:?}");
    assert!(results.contains(&("tools".into(), "sim-tools-bad".into(), false)), "{results:?}");
    let routes: Value = gw.get(ALICE, "/v1/routes").await.json().await.unwrap();
    let tools = routes["routes"].as_array().unwrap().iter().find(|r| r["name"] == "tools").unwrap();
    assert_eq!(tools["chain"][0]["eligible"], true, "{tools}");
    // The record keeps the first finding: the tool, and what its schema refused.
    let reason = tools["chain"][1]["reason"].as_str().unwrap();
    assert!(reason.contains("case `forced`: repeat 1/2: tool `get_weather`: arguments do not match its parameters: at /days: value is not of type \"integer\""), "{reason}");

    let job = create(&gw, "tools-ok", &tools_body("Weather in Utrecht?")).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-tools");
    let (name, arguments) = called(&job);
    assert_eq!(name, "get_weather");
    assert_eq!(arguments["city"], "Weather in Utrecht?", "{job}");

    // The good provider fails; the only fallback broke the schema in its run.
    gw.sim().queue(Some("sim:tool_call"), "status=503", 1).unwrap();
    let calls_before = gw.sim().calls().total;
    let job = create(&gw, "tools-refused", &tools_body("Weather in Oslo?")).await;
    assert_eq!(job["status"], "failed", "{job}");
    let refused = job["error"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{job}");
    let refusal = refused[0].as_str().unwrap();
    assert!(refusal.starts_with("sim-tools-bad: failed its run"), "{refusal}");
    assert!(refusal.contains("tool `get_weather`: arguments do not match its parameters"), "{refusal}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no attempt on the bad provider");
    assert_eq!(gw.sim().calls().total - calls_before, 1, "only the good provider was called");
}

/// At runtime the answer's tool calls are checked against the request's
/// own tools: schema-breaking arguments, or a tool the request did not
/// offer, settle the attempt `contract_violation` and the chain fails over.
async fn runtime_tool_call_violation_fails_over(store: TestStore) {
    let (gw, config) = start(&store, |_| {}).await;
    let results = contract_run(&gw, &config).await;
    assert!(results.contains(&("tools".into(), "sim-tools-fallback".into(), true)), "{results:?}");

    // sim-tools and sim-tools-fallback share the model: only the first call breaks.
    gw.sim().queue(Some("sim:tool_call"), "tool_args=bad", 1).unwrap();
    let job = create(&gw, "tools-bad-args", &tools_body("Weather in Rome?")).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"][0]["provider"], "sim-tools");
    assert_eq!(job["attempts"][0]["state"], "failed");
    assert_eq!(job["attempts"][0]["outcome"], "contract_violation");
    let detail = job["attempts"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(
            r#"tool `get_weather`: arguments do not match its parameters: "city" is a required property"#
        ),
        "{detail}"
    );
    assert_eq!(job["result"]["provider"], "sim-tools-fallback", "{job}");
    assert_eq!(called(&job).0, "get_weather");

    // The request's tools are what count, not the suite's: a client offering
    // its own tool gets calls of it, and a call of anything else is refused.
    let mut own = tools_body("Where is order 42?");
    own["params"] = json!({"tools": [{"type": "function", "function": {"name": "find_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]});
    gw.sim().queue(Some("sim:tool_call"), "tool=get_weather", 1).unwrap();
    let job = create(&gw, "tools-not-offered", &own).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"][0]["outcome"], "contract_violation");
    let detail = job["attempts"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("tool `get_weather` was called but not offered (offered: find_order)"),
        "{detail}"
    );
    let (name, arguments) = called(&job);
    assert_eq!((name, arguments["order_id"].as_str()), ("find_order", Some("Where is order 42?")));
}
