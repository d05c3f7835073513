//! The operator CLI against the configured database, and the logs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, chat_body, set_provider, set_route, wait_for_attempt};
use intentgate::jobs::AttemptState;
use serde_json::{Value, json};

store_matrix!(
    each_replica_reports_the_configuration_it_runs,
    cli_resolves_an_unknown_attempt_and_the_api_sees_it_at_once,
    shutdown_drains_a_drive_and_cuts_a_hung_listener_at_the_bound,
);

const BIN: &str = env!("CARGO_BIN_EXE_intentgate");

/// Two replicas on one store, one with a changed file: `/readyz` and
/// `/metrics` say which configuration each runs (the SHA-256 of its file,
/// 12 hex digits), so a rollout shows who runs what.
async fn each_replica_reports_the_configuration_it_runs(store: TestStore) {
    let old = TestGateway::start(&store).await;
    let new = TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "attempt_timeout", "9s")).await;
    let version = |gw: &TestGateway| {
        let url = gw.url("/readyz");
        let client = gw.client.clone();
        async move {
            let ready: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            ready["config_version"].as_str().unwrap().to_owned()
        }
    };
    let (old_version, new_version) = (version(&old).await, version(&new).await);
    assert!(old_version.len() == 12 && old_version.bytes().all(|b| b.is_ascii_hexdigit()), "{old_version}");
    assert_ne!(old_version, new_version, "another file, another version");
    let metrics = new.client.get(new.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("intentgate_config_info{{version=\"{new_version}\"}} 1")), "{metrics}");
}

async fn cli(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("INTENTGATE_DATABASE_URL")
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn cli_resolves_an_unknown_attempt_and_the_api_sees_it_at_once(store: TestStore) {
    let mut config_doc = None;
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hang");
        set_route(doc, "chat", "attempt_timeout", "100ms");
        let mut engine = toml::Table::new();
        engine.insert("sweep_interval".into(), "100ms".into());
        doc.insert("engine".into(), engine.into());
        config_doc = Some(doc.clone());
    })
    .await;
    let path = std::env::temp_dir().join(format!("intentgate-cli-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, toml::to_string(&config_doc.unwrap()).unwrap()).unwrap();

    let mut events = gw.events();
    let job: Value = gw.create(ALICE, "cli-job", &chat_body("x")).await.json().await.unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;

    let (ok, stdout, stderr) = cli(&path, &["jobs", "list", "--status", "unknown"]).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&id), "{stdout}");

    let (ok, stdout, stderr) =
        cli(&path, &["jobs", "resolve", &id, "1", "--as", "abandoned", "--reason", "provider confirmed"])
            .await;
    assert!(ok, "{stdout}{stderr}");
    let now: Value = gw.get(ALICE, &format!("/v1/jobs/{id}")).await.json().await.unwrap();
    assert_eq!(now["attempts"][0]["state"], "abandoned", "the API sees it at once: {now}");
    assert!(now["attempts"][0]["resolved_by"].as_str().unwrap().starts_with("cli:"));

    // The serving gateway's sweep takes the job on to the fallback.
    let done = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"]["provider"], "sim-fallback");

    let (ok, stdout, _) = cli(&path, &["jobs", "show", &id]).await;
    assert!(ok);
    assert!(stdout.contains("won: its answer is the job's result"), "{stdout}");
    assert!(stdout.contains("resolved by cli:"), "{stdout}");
    let (ok, _, stderr) =
        cli(&path, &["jobs", "resolve", &id, "1", "--as", "failed", "--reason", "again"]).await;
    assert!(!ok, "resolving a settled attempt is refused");
    assert!(stderr.contains("not `unknown`"), "{stderr}");
    let _ = std::fs::remove_file(path);
}

/// A provider's API key and a caller's API key never reach the logs, even at
/// TRACE level in JSON, while the spans carry the job identity.
#[tokio::test]
async fn logs_carry_job_spans_and_no_secrets() {
    const PROVIDER_KEY: &str = "sk-live-provider-secret-0123456789";
    let store = TestStore::new(common::Backend::Sqlite).await.unwrap();
    let sim =
        intentgate_providers::sim::Simulator::new(9).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
    set_provider(&mut doc, "sim-primary", "api_key_env", "INTENTGATE_TEST_PROVIDER_KEY");
    let path = std::env::temp_dir().join(format!("intentgate-logs-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let common::Spawned { mut child, url, logs } = common::spawn_binary(
        &["--log-format", "json", "serve", "--config", path.to_str().unwrap()],
        &[("INTENTGATE_TEST_PROVIDER_KEY", PROVIDER_KEY), ("INTENTGATE_LOG", "trace")],
    )
    .await;
    let job = common::create_settled(&url, "logged", &chat_body("hello"), &[]).await;
    assert_eq!(job["status"], "succeeded");
    let seen = sim.last_request(job["id"].as_str().unwrap()).unwrap();
    assert!(seen.headers.iter().any(|(_, v)| v.contains(PROVIDER_KEY)), "the key did reach the provider");
    let stored_keys = made_used_and_rotated_key(&url).await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let logs = logs.lock().unwrap().clone();
    assert!(!logs.contains(PROVIDER_KEY), "the provider key leaked into the logs");
    assert!(!logs.contains(ALICE), "the caller's API key leaked into the logs");
    for key in stored_keys {
        assert!(!logs.contains(&key[3..]), "a stored API key leaked into the logs");
    }
    let lines: Vec<Value> = logs.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(!lines.is_empty(), "JSON log lines");
    let id = job["id"].as_str().unwrap();
    assert!(
        lines.iter().any(|l| l.to_string().contains(id) && l.to_string().contains("attempt")),
        "a log line carries the job id and the attempt"
    );
    let _ = std::fs::remove_file(path);
}

/// A stored key made, used and rotated through the admin API: both secrets.
async fn made_used_and_rotated_key(url: &str) -> [String; 2] {
    let client = common::client();
    let admin = |path: &str| client.post(format!("{url}{path}")).bearer_auth(common::ADMIN);
    let made = admin("/v1/admin/keys").json(&json!({"name": "logged", "owner": "o"})).send().await.unwrap();
    let made: Value = made.json().await.unwrap();
    let key = made["secret"].as_str().unwrap().to_owned();
    let used = client.post(format!("{url}/v1/jobs")).bearer_auth(&key).header("idempotency-key", "stored");
    assert!(used.json(&chat_body("x")).send().await.unwrap().status().is_success());
    let rotate = admin(&format!("/v1/admin/keys/{}/rotate", made["id"].as_str().unwrap()));
    let rotated: Value = rotate.send().await.unwrap().json().await.unwrap();
    [key, rotated["key"]["secret"].as_str().unwrap().to_owned()]
}

/// A graceful shutdown (what SIGTERM does): the server stops, a drive in
/// flight is let settle — its answer is recorded, not dropped — and a late
/// listener waiting on a hung provider holds the process up only until
/// `drain_timeout`, then is handed over (tests/replicas.rs shows a late
/// answer that arrives within the bound being recorded).
async fn shutdown_drains_a_drive_and_cuts_a_hung_listener_at_the_bound(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
        server.insert("drain_timeout".into(), "1s".into());
        set_provider(doc, "sim-primary", "model", "sim:hold=in-flight");
        set_provider(doc, "sim-fallback", "model", "sim:hang");
        set_route(doc, "extract", "attempt_timeout", "100ms");
        set_route(doc, "extract", "chain", toml::Value::Array(vec!["sim-fallback".into()]));
    })
    .await;
    let mut events = gw.events();
    let hung: Value = gw
        .create(
            ALICE,
            "hung",
            &json!({"route": "extract", "input": {"messages": [{"role": "user", "content": "x"}]}}),
        )
        .await
        .json()
        .await
        .unwrap();
    let hung = hung["id"].as_str().unwrap().to_owned();
    wait_for_attempt(&mut events, &hung, 1, AttemptState::Unknown).await;
    let held: Value = gw.create(ALICE, "held", &chat_body("x")).await.json().await.unwrap();
    let held: uuid::Uuid = held["id"].as_str().unwrap().parse().unwrap();
    gw.sim().wait_for_calls(2).await;

    let common::TestGateway { gateway, sim, .. } = gw;
    let (store_handle, sim) = (gateway.store.clone(), sim.unwrap());
    let mut stopping = tokio::spawn(gateway.shutdown());
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), &mut stopping).await;
    assert!(early.is_err(), "shutdown must wait for the drive whose provider has not answered yet");
    sim.release("in-flight");
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(5), stopping).await;
    assert!(
        stopped.is_ok(),
        "the drive settled and the hung listener was cut at the bound: shutdown is done"
    );
    let job = store_handle.job(held).await.unwrap().unwrap();
    assert_eq!(job.status, intentgate::jobs::JobStatus::Succeeded, "the answer in flight was recorded");
    assert_eq!(sim.calls().total, 2, "nothing was sent twice");
}
