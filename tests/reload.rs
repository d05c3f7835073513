//! Configuration reload without a restart (`POST /v1/admin/reload`, and
//! SIGHUP to `intentgate serve`), over real HTTP against the simulator on
//! loopback, on both stores: a changed chain applies to new jobs and not to
//! a job already driving; a broken file is refused with its reason and the
//! old configuration keeps serving; the version the replica runs is
//! reported. Upstream calls are counted at the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use common::{ADMIN, ALICE, TestGateway, TestStore, set_route};
use intentgate::jobs::AttemptState;
use serde_json::{Value, json};

store_matrix!(
    a_reloaded_chain_serves_new_jobs_and_not_one_already_driving,
    a_broken_file_is_refused_and_the_running_config_keeps_serving,
    a_refused_file_is_described_without_its_secrets,
    a_keys_job_is_found_after_a_reload_removed_its_route,
);

/// Everything this test binary's gateways log, from the first call on
/// (one global subscriber for the process; each test looks for its own
/// lines in it).
fn captured_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let subscriber =
            tracing_subscriber::fmt().with_ansi(false).with_writer(move || LogSink(sink.clone())).finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        log
    })
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The shipped config pointed at a fresh simulator, written to a file of
/// its own that the test edits; and the gateway started from that file.
async fn gateway_from_a_file(store: &TestStore) -> (TestGateway, PathBuf, toml::Table) {
    gateway_from_a_file_with(store, |_| {}).await
}

/// As [`gateway_from_a_file`], the file changed by `tweak` first.
async fn gateway_from_a_file_with(
    store: &TestStore,
    tweak: impl FnOnce(&mut toml::Table),
) -> (TestGateway, PathBuf, toml::Table) {
    let sim =
        intentgate_providers::sim::Simulator::new(7).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
    tweak(&mut doc);
    let path = std::env::temp_dir().join(format!("intentgate-reload-{}.toml", uuid::Uuid::now_v7()));
    write(&path, &doc);
    let config = intentgate::config::Config::load(&path).unwrap();
    let mut gw = TestGateway::start_with(config).await;
    gw.sim = Some(sim);
    (gw, path, doc)
}

fn write(path: &Path, doc: &toml::Table) {
    std::fs::write(path, toml::to_string(doc).unwrap()).unwrap();
}

async fn reload(gw: &TestGateway) -> reqwest::Response {
    gw.request(reqwest::Method::POST, "/v1/admin/reload", ADMIN).send().await.unwrap()
}

async fn running_version(gw: &TestGateway) -> String {
    let ready: Value = gw.client.get(gw.url("/readyz")).send().await.unwrap().json().await.unwrap();
    ready["config_version"].as_str().unwrap().to_owned()
}

async fn create(gw: &TestGateway, key: &str) -> String {
    let created: Value = gw.create(ALICE, key, &common::chat_body(key)).await.json().await.unwrap();
    created["id"].as_str().unwrap().to_owned()
}

/// Job A starts on the primary under chain `sim-primary → sim-fallback`
/// and is held there; the chain is reloaded as `sim-fallback →
/// sim-primary`. A new job B starts on `sim-fallback`, the new first;
/// A's primary then fails (a 500) and A fails over along the chain it
/// started with — to `sim-fallback`, which the new chain would not have
/// given it after `sim-primary`.
async fn a_reloaded_chain_serves_new_jobs_and_not_one_already_driving(store: TestStore) {
    let (gw, path, mut doc) = gateway_from_a_file(&store).await;
    let before = running_version(&gw).await;
    assert_eq!(before.len(), 12, "a file's version is reported: {before:?}");
    let mut events = gw.events();
    gw.sim().queue(Some("sim:ok"), "hold=a;status=500", 1).unwrap();
    let a = create(&gw, "job-a").await;
    gw.sim().wait_for_calls(1).await; // A's attempt 1 is at the primary

    set_route(
        &mut doc,
        "chat",
        "chain",
        toml::Value::Array(vec!["sim-fallback".into(), "sim-primary".into()]),
    );
    write(&path, &doc);
    let reloaded = reload(&gw).await;
    assert_eq!(reloaded.status(), 200);
    let reloaded: Value = reloaded.json().await.unwrap();
    assert_eq!(reloaded["previous"], before.as_str());
    assert_ne!(reloaded["version"], before.as_str(), "{reloaded}");
    assert_eq!(reloaded["restart_required"], json!([]));
    assert_eq!(running_version(&gw).await, reloaded["version"].as_str().unwrap());

    let b = create(&gw, "job-b").await;
    let b = common::settled_job(&gw, ALICE, &b).await;
    assert_eq!(b["result"]["provider"], "sim-fallback", "a new job takes the new chain: {b}");

    gw.sim().release("a");
    common::wait_for_attempt(&mut events, &a, 1, AttemptState::Failed).await;
    let a = common::settled_job(&gw, ALICE, &a).await;
    assert_eq!(a["status"], "succeeded", "{a}");
    let tried: Vec<&str> =
        a["attempts"].as_array().unwrap().iter().map(|x| x["provider"].as_str().unwrap()).collect();
    assert_eq!(tried, ["sim-primary", "sim-fallback"], "the job kept the chain it started with: {a}");
    let calls = gw.sim().calls();
    assert_eq!(calls.total, 3, "A twice (primary, fallback), B once: {calls:?}");
    let _ = std::fs::remove_file(path);
}

/// A file that does not validate changes nothing: 422 with the reason, the
/// same version, the same chain; a user key may not reload at all.
async fn a_broken_file_is_refused_and_the_running_config_keeps_serving(store: TestStore) {
    let (gw, path, mut doc) = gateway_from_a_file(&store).await;
    let before = running_version(&gw).await;
    set_route(&mut doc, "chat", "chain", toml::Value::Array(vec!["ghost".into()]));
    write(&path, &doc);
    let refused = reload(&gw).await;
    let problem = common::assert_problem(refused, 422, "config-rejected").await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("routes[0].chain[0]") && detail.contains("ghost"), "names the key: {detail}");
    assert_eq!(running_version(&gw).await, before, "the running configuration stays");
    let job = create(&gw, "after-refusal").await;
    let job = common::settled_job(&gw, ALICE, &job).await;
    assert_eq!(job["result"]["provider"], "sim-primary", "served by the chain it had: {job}");

    let user = gw.request(reqwest::Method::POST, "/v1/admin/reload", ALICE).send().await.unwrap();
    common::assert_problem(user, 403, "forbidden").await;
    let _ = std::fs::remove_file(path);
}

/// A file whose broken line holds the store's password is refused (422)
/// by where the fault is and what it is — the line, the key — and neither
/// the answer nor the log quotes the line: the password appears in
/// neither. The same for a URL the store cannot use.
async fn a_refused_file_is_described_without_its_secrets(store: TestStore) {
    let log = captured_log();
    let (gw, path, doc) = gateway_from_a_file(&store).await;
    let password = format!("pw-{}", uuid::Uuid::now_v7().simple());
    let with_url = |url: &str| {
        let mut doc = doc.clone();
        doc["store"].as_table_mut().unwrap().insert("url".into(), url.into());
        toml::to_string(&doc).unwrap()
    };
    let url = format!("postgres://gw:{password}@db/x");
    let broken_line = with_url(&url).replace(&format!("\"{url}\""), &format!("\"{url}\" oops"));
    assert!(broken_line.contains(" oops"));
    let unusable_url = with_url(&format!("mysql://gw:{password}@db/x"));
    for (case, text) in [("a broken line", broken_line), ("an unusable URL", unusable_url)] {
        std::fs::write(&path, text).unwrap();
        let refused = reload(&gw).await;
        let problem = common::assert_problem(refused, 422, "config-rejected").await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("store.url"), "{case}: names the key: {detail}");
        assert!(!problem.to_string().contains(&password), "{case}: {problem}");
        let logged = String::from_utf8(log.lock().unwrap().clone()).unwrap();
        assert!(logged.contains("configuration reload refused"), "{case}: the refusal is logged: {logged}");
        assert!(!logged.contains(&password), "{case}: {logged}");
    }
    assert!(problem_free_reload(&gw, &path, &doc).await, "the good file still reloads");
    let _ = std::fs::remove_file(path);
}

/// Writes `doc` back and reloads it: whether it was taken.
async fn problem_free_reload(gw: &TestGateway, path: &Path, doc: &toml::Table) -> bool {
    write(path, doc);
    reload(gw).await.status() == 200
}

/// A copy of the `[[array]]` entry named `from`, named `to`, with `changes`.
fn add_copy(doc: &mut toml::Table, array: &str, from: &str, to: &str, changes: &[(&str, toml::Value)]) {
    let entries = doc[array].as_array_mut().unwrap();
    let original = entries.iter().find(|entry| entry["name"].as_str() == Some(from)).unwrap();
    let mut copy = original.as_table().unwrap().clone();
    copy.insert("name".into(), to.into());
    copy.remove("aliases"); // a name answers to one route only
    for (key, value) in changes {
        copy.insert((*key).into(), value.clone());
    }
    entries.push(copy.into());
}

/// Drops the `[[routes]]` entry named `name`.
fn remove_route(doc: &mut toml::Table, name: &str) {
    doc["routes"].as_array_mut().unwrap().retain(|route| route["name"].as_str() != Some(name));
}

/// A job is found by its key whatever the configuration says now. Jobs on
/// routes `brief` (succeeded, through the native API and the OpenAI door)
/// and `doomed` (failed) exist; a reload removes both routes. The same
/// requests under the same keys are replayed (200, the same job and answer,
/// nothing sent again), another body under one of the keys is a conflict,
/// and only a new key is `unknown-route`. A manual attempt is refused by
/// the job's real state: `job-completed` for the succeeded one, and for
/// the failed one, which could take one, `unknown-route` — never 404.
async fn a_keys_job_is_found_after_a_reload_removed_its_route(store: TestStore) {
    let (gw, path, mut doc) = gateway_from_a_file_with(&store, |doc| {
        add_copy(doc, "routes", "chat", "brief", &[]);
        add_copy(doc, "providers", "sim-primary", "sim-down", &[("model", "sim:status=503".into())]);
        add_copy(doc, "routes", "chat", "doomed", &[("chain", toml::Value::Array(vec!["sim-down".into()]))]);
    })
    .await;
    let body = json!({"route": "brief", "input": {"messages": [{"role": "user", "content": "hi"}]}});
    let job = common::create_settled(&gw.gateway.url(), "brief-1", &body, &[]).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let chat = json!({"model": "brief", "messages": [{"role": "user", "content": "hello"}]});
    let answered = gw.chat_completion("brief-2", &chat).await;
    assert_eq!(answered.status(), 200);
    let answered: Value = answered.json().await.unwrap();
    let doomed = json!({"route": "doomed", "input": {"messages": [{"role": "user", "content": "x"}]}});
    let failed = common::create_settled(&gw.gateway.url(), "doomed-1", &doomed, &[]).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let calls = gw.sim().calls().total;

    remove_route(&mut doc, "brief");
    remove_route(&mut doc, "doomed");
    write(&path, &doc);
    assert_eq!(reload(&gw).await.status(), 200);

    let replayed = gw.create(ALICE, "brief-1", &body).await;
    assert_eq!(replayed.status(), 200, "the key's job, replayed");
    let replayed: Value = replayed.json().await.unwrap();
    assert_eq!((&replayed["id"], &replayed["status"]), (&job["id"], &job["status"]), "{replayed}");
    let again = gw.chat_completion("brief-2", &chat).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.unwrap(), answered, "the same answer, replayed");
    let other = json!({"route": "brief", "input": {"messages": [{"role": "user", "content": "bye"}]}});
    let conflict =
        common::assert_problem(gw.create(ALICE, "brief-1", &other).await, 409, "idempotency-key-reused")
            .await;
    assert_eq!(conflict["job_id"], job["id"]);
    let jobs = gw.job_count().await;
    common::assert_problem(gw.create(ALICE, "brief-3", &body).await, 422, "unknown-route").await;
    assert_eq!(gw.job_count().await, jobs, "a new key on a removed route stores nothing");

    let attempt = |id: &Value| {
        gw.request(reqwest::Method::POST, &format!("/v1/jobs/{}/attempts", id.as_str().unwrap()), ALICE)
            .send()
    };
    let completed = common::assert_problem(attempt(&job["id"]).await.unwrap(), 409, "job-completed").await;
    assert_eq!(completed["job_status"], "succeeded");
    let gone = common::assert_problem(attempt(&failed["id"]).await.unwrap(), 422, "unknown-route").await;
    assert_eq!(gone["job_id"], failed["id"]);
    assert_eq!(gw.sim().calls().total, calls, "nothing was sent again");
    let _ = std::fs::remove_file(path);
}

/// `intentgate serve` reloads on SIGHUP: the version it reports changes to
/// the new file's, and a new job takes the new chain; a broken file sent
/// the same way is refused in the log and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_serve_was_started_from() {
    let dir = std::env::temp_dir().join(format!("intentgate-sighup-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let store_url = format!("sqlite://{}", dir.join("jobs.db").display());
    // The shipped config as `serve` runs it (its own simulator, its
    // contract runs), on a database of its own.
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml")).unwrap();
    let mut doc: toml::Table = toml::from_str(&shipped).unwrap();
    doc["store"].as_table_mut().unwrap().insert("url".into(), store_url.into());
    let path = dir.join("gateway.toml");
    write(&path, &doc);
    let mut gateway = common::spawn_serve(&path).await;
    let client = common::client();
    let version = |client: reqwest::Client, url: String| async move {
        let ready: Value = client.get(format!("{url}/readyz")).send().await.unwrap().json().await.unwrap();
        ready["config_version"].as_str().unwrap().to_owned()
    };
    let before = version(client.clone(), gateway.url.clone()).await;
    let hangup = |pid: u32| {
        let status = std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap();
        assert!(status.success());
    };
    let pid = gateway.child.id().unwrap();

    set_route(&mut doc, "chat", "chain", toml::Value::Array(vec!["sim-fallback".into()]));
    write(&path, &doc);
    hangup(pid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        let now = version(client.clone(), gateway.url.clone()).await;
        if now != before {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload: {}",
            gateway.logs.lock().unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let job = common::create_settled(&gateway.url, "after-hangup", &common::chat_body("hi"), &[]).await;
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job}");

    std::fs::write(&path, "this is not toml = [").unwrap();
    hangup(pid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gateway.logs.lock().unwrap().contains("configuration reload refused") {
        assert!(std::time::Instant::now() < deadline, "no refusal logged: {}", gateway.logs.lock().unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(version(client.clone(), gateway.url.clone()).await, after, "a broken file changes nothing");
    gateway.child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
