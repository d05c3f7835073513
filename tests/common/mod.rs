//! Shared test harness: real stores (a fresh SQLite file, or a fresh schema
//! in the real PostgreSQL), a gateway started in-process on a loopback port,
//! and a client speaking to it over real HTTP.
//!
//! PostgreSQL: `INTENTGATE_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it cannot be reached the
//! Postgres half of the matrix FAILS if `INTENTGATE_REQUIRE_PG=1` (CI sets it)
//! and otherwise prints a loud SKIPPED line.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod proxy;
pub mod webdriver;

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::net::SocketAddr;

use intentgate::app::RunningGateway;
use intentgate::config::Config;
use intentgate::engine::EngineEvent;
use intentgate_providers::sim::{SimHandle, Simulator};
use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;
use sqlx::Connection;

pub const ALICE: &str = "demo-alice";
pub const BOB: &str = "demo-bob";
pub const ADMIN: &str = "demo-admin";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs each named scenario `async fn name(store: TestStore)` once per
/// backend: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! store_matrix {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $scenario() {
                    let store = $crate::common::TestStore::new($crate::common::Backend::Sqlite).await.unwrap();
                    super::$scenario(store).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $scenario() {
                    if let Some(store) = $crate::common::TestStore::new($crate::common::Backend::Postgres).await {
                        super::$scenario(store).await
                    }
                }
            )*
        }
    };
}

/// A fresh, empty database for one test.
pub struct TestStore {
    pub backend: Backend,
    pub url: String,
    sqlite_dir: Option<PathBuf>,
}

impl TestStore {
    /// `None` only for PostgreSQL when it is unreachable and not required.
    pub async fn new(backend: Backend) -> Option<TestStore> {
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(format!("intentgate-test-{}", uuid::Uuid::now_v7()));
                std::fs::create_dir_all(&dir).unwrap();
                let url = format!("sqlite://{}", dir.join("jobs.db").display());
                Some(TestStore { backend, url, sqlite_dir: Some(dir) })
            }
            Backend::Postgres => {
                let base = pg_base_url();
                let mut conn =
                    match tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(&base))
                        .await
                    {
                        Ok(Ok(conn)) => conn,
                        Ok(Err(err)) => return pg_unreachable(&base, &err.to_string()),
                        Err(_) => return pg_unreachable(&base, "timed out"),
                    };
                drop_stale_schemas(&mut conn).await;
                let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let separator = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{separator}options=-c%20search_path%3D{schema}");
                Some(TestStore { backend, url, sqlite_dir: None })
            }
        }
    }

    /// The same database reached through another URL (e.g. via a proxy).
    pub fn url_via(&self, host_port: &str) -> String {
        let base = pg_base_url();
        let start = base.find('@').map(|i| i + 1).unwrap_or("postgres://".len());
        let end = base[start..].find('/').map(|i| start + i).unwrap();
        format!("{}{}{}", &base[..start], host_port, &self.url[end..])
    }

    pub fn pg_host_port(&self) -> String {
        let base = pg_base_url();
        let start = base.find('@').map(|i| i + 1).unwrap_or("postgres://".len());
        let end = base[start..].find('/').map(|i| start + i).unwrap();
        base[start..end].to_owned()
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some(dir) = &self.sqlite_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Test schemas are named after a UUIDv7, whose timestamp tells their age:
/// drop those left behind by runs more than an hour old.
async fn drop_stale_schemas(conn: &mut sqlx::PgConnection) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT schema_name::text FROM information_schema.schemata WHERE schema_name LIKE 't\\_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for name in names {
        let Ok(id) = uuid::Uuid::parse_str(&name[2..]) else { continue };
        let Some(ts) = id.get_timestamp() else { continue };
        let (secs, nanos) = ts.to_unix();
        if std::time::UNIX_EPOCH + Duration::new(secs, nanos) < hour_ago {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                .execute(&mut *conn)
                .await;
        }
    }
}

pub fn pg_base_url() -> String {
    std::env::var("INTENTGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Writes straight to the process's stderr: libtest captures `eprintln!` of
/// passing tests, and a skip must be seen, not swallowed.
/// Waits, if the current wall-clock minute is nearly over, for the next:
/// rate limits count per minute, and a test that needs two requests in one
/// window must not straddle its end (a wait for the clock, not an event).
pub async fn clear_of_the_minute_end() {
    let into_minute = chrono::Utc::now().timestamp_millis().rem_euclid(60_000);
    if into_minute > 50_000 {
        tokio::time::sleep(std::time::Duration::from_millis((60_000 - into_minute + 100) as u64)).await;
    }
}

pub fn loud(message: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(message.as_bytes());
}

fn pg_unreachable(url: &str, why: &str) -> Option<TestStore> {
    if std::env::var("INTENTGATE_REQUIRE_PG").is_ok_and(|v| v == "1") {
        panic!("PostgreSQL is required (INTENTGATE_REQUIRE_PG=1) but {url} is unreachable: {why}");
    }
    loud(&format!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: PostgreSQL test — {url} is unreachable: {why}\n\
         !!! Start PostgreSQL or set INTENTGATE_TEST_PG_URL; CI sets INTENTGATE_REQUIRE_PG=1.\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}

/// The shipped config as a TOML document, pointed at `store_url`, listening
/// on a free loopback port, its providers pointed at `sim_addr` (or wherever
/// they point, when `None`) and its in-process simulator off.
pub fn test_config_doc(store_url: &str, sim_addr: Option<SocketAddr>) -> toml::Table {
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gateway.toml")).unwrap();
    let mut doc: toml::Table = toml::from_str(&shipped).unwrap();
    let store = doc.get_mut("store").unwrap().as_table_mut().unwrap();
    store.insert("url".into(), store_url.into());
    store.insert("acquire_timeout".into(), "1s".into());
    let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
    server.insert("listen".into(), "127.0.0.1:0".into());
    doc.remove("simulator");
    // The contract gate is the subject of tests/contracts_gate.rs; elsewhere
    // routes fail over freely, so each test shows one mechanism at a time.
    let mut contracts = toml::Table::new();
    let suites = Path::new(env!("CARGO_MANIFEST_DIR")).join("contract-tests");
    contracts.insert("dir".into(), suites.to_str().unwrap().into());
    doc.insert("contracts".into(), contracts.into());
    for route in doc.get_mut("routes").unwrap().as_array_mut().unwrap() {
        let route = route.as_table_mut().unwrap();
        route.insert("require_contract_for_primary".into(), false.into());
        route.insert("require_contract_for_fallback".into(), false.into());
        // Only a 429 retries the same provider here, so a scripted 5xx or
        // refused connection shows failover; tests of the retry classes
        // set them back (`with_default_retry_classes`).
        route.insert("retry_statuses".into(), toml::Value::Array(vec![429.into()]));
        route.insert("retry_connect_errors".into(), false.into());
    }
    if let Some(addr) = sim_addr {
        for provider in doc.get_mut("providers").unwrap().as_array_mut().unwrap() {
            let provider = provider.as_table_mut().unwrap();
            let url = match provider["dialect"].as_str().unwrap() {
                "openai" | "openai-responses" => format!("http://{addr}/v1"),
                _ => format!("http://{addr}"),
            };
            provider.insert("base_url".into(), url.clone().into());
            // A service-account key names where its tokens are granted:
            // this simulator, not the shipped one.
            if let Some(path) =
                provider.get("credentials_file").and_then(toml::Value::as_str).map(str::to_owned)
            {
                let key = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
                provider.insert("credentials_file".into(), vertex_key_file(&key, &url).into());
            }
        }
    }
    doc
}

/// A copy of a service-account key file (`key`, e.g. one of the
/// simulator's) whose `token_uri` is the simulator at `sim_base`, in a
/// fresh temp file; its path.
pub fn vertex_key_file(key: &str, sim_base: &str) -> String {
    let mut file: Value = serde_json::from_str(key).unwrap();
    file["token_uri"] = format!("{sim_base}/token").into();
    let path = std::env::temp_dir().join(format!("intentgate-vertex-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(&path, file.to_string()).unwrap();
    path.to_str().unwrap().to_owned()
}

pub fn test_config(store_url: &str) -> Config {
    config_from_doc(&test_config_doc(store_url, None))
}

pub fn config_from_doc(doc: &toml::Table) -> Config {
    Config::from_toml(Path::new("test.toml"), &toml::to_string(doc).unwrap()).unwrap()
}

/// Sets `key = value` on the `[[providers]]` entry named `name`.
/// Gives every route the shipped retry classes back (see `test_config_doc`).
pub fn with_default_retry_classes(doc: &mut toml::Table) {
    for route in doc.get_mut("routes").unwrap().as_array_mut().unwrap() {
        let route = route.as_table_mut().unwrap();
        route.remove("retry_statuses");
        route.remove("retry_connect_errors");
    }
}

pub fn set_provider(doc: &mut toml::Table, name: &str, key: &str, value: impl Into<toml::Value>) {
    set_in(doc, "providers", name, key, value.into());
}

/// Sets `key = value` on the `[[routes]]` entry named `name`.
pub fn set_route(doc: &mut toml::Table, name: &str, key: &str, value: impl Into<toml::Value>) {
    set_in(doc, "routes", name, key, value.into());
}

/// Sets `key = value` in `[engine]`, creating the table if the file has none.
pub fn set_engine(doc: &mut toml::Table, key: &str, value: impl Into<toml::Value>) {
    let engine = doc.entry("engine").or_insert(toml::Value::Table(Default::default()));
    engine.as_table_mut().unwrap().insert(key.into(), value.into());
}

fn set_in(doc: &mut toml::Table, array: &str, name: &str, key: &str, value: toml::Value) {
    let entry = doc[array]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .map(|v| v.as_table_mut().unwrap())
        .find(|t| t["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {array} entry `{name}`"));
    entry.insert(key.into(), value);
}

/// A gateway in this process on a loopback port, its own provider simulator
/// (a real HTTP server on another loopback port), and an HTTP client.
pub struct TestGateway {
    pub gateway: RunningGateway,
    pub client: reqwest::Client,
    pub sim: Option<SimHandle>,
}

impl TestGateway {
    pub async fn start(store: &TestStore) -> TestGateway {
        Self::start_tweaked(store, |_| {}).await
    }

    /// Starts a simulator, then the gateway with the shipped config pointed
    /// at it and changed by `tweak`.
    pub async fn start_tweaked(store: &TestStore, tweak: impl FnOnce(&mut toml::Table)) -> TestGateway {
        let sim = Simulator::new(7).record_bodies(true).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut doc = test_config_doc(&store.url, Some(sim.addr()));
        tweak(&mut doc);
        let mut gw = Self::start_with(config_from_doc(&doc)).await;
        gw.sim = Some(sim);
        gw
    }

    pub async fn start_with(config: Config) -> TestGateway {
        let gateway = intentgate::app::start(config).await.unwrap();
        TestGateway { gateway, client: client(), sim: None }
    }

    pub fn sim(&self) -> &SimHandle {
        self.sim.as_ref().expect("this gateway has a simulator")
    }

    pub fn events(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.gateway.engine.subscribe()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.gateway.url(), path)
    }

    pub fn request(&self, method: Method, path: &str, api_key: &str) -> RequestBuilder {
        self.client.request(method, self.url(path)).bearer_auth(api_key)
    }

    /// `POST /v1/jobs` with a key and a JSON body.
    pub async fn create(&self, api_key: &str, idem_key: &str, body: &Value) -> Response {
        self.request(Method::POST, "/v1/jobs", api_key)
            .header("idempotency-key", idem_key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST /v1/chat/completions` as alice, with a key and a JSON body.
    pub async fn chat_completion(&self, idem_key: &str, body: &Value) -> Response {
        self.post_door("/v1/chat/completions", idem_key, body).await
    }

    /// `POST` to a door (`/v1/embeddings`, `/v1/responses`…) as alice, with
    /// a key and a JSON body.
    pub async fn post_door(&self, path: &str, idem_key: &str, body: &Value) -> Response {
        self.request(Method::POST, path, ALICE)
            .header("idempotency-key", idem_key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn get(&self, api_key: &str, path: &str) -> Response {
        self.request(Method::GET, path, api_key).send().await.unwrap()
    }

    pub async fn job_count(&self) -> i64 {
        self.gateway.store.count_jobs(None).await.unwrap()
    }
}

/// A plain HTTP client (the gateway speaks http on loopback in tests).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap()
}

/// Creates `owner`'s job `key` while the simulator's next `sim:ok` call
/// hangs, and waits until its attempt 1 is `unknown` (the route needs a
/// short `attempt_timeout`). Returns the job's id.
pub async fn job_left_unknown(gw: &TestGateway, owner: &str, key: &str, text: &str) -> String {
    let mut events = gw.events();
    gw.sim().queue(Some("sim:ok"), "hang", 1).unwrap();
    let created: Value = gw.create(owner, key, &chat_body(text)).await.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    wait_for_attempt(&mut events, &id, 1, intentgate::jobs::AttemptState::Unknown).await;
    id
}

/// Waits (on engine events, not sleeps) until attempt `number` of `job_id`
/// reaches `state`; panics after 10 s.
pub async fn wait_for_attempt(
    events: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    job_id: &str,
    number: i32,
    state: intentgate::jobs::AttemptState,
) {
    let what = format!("attempt {number} of {job_id} becoming {state}");
    wait_for_event(&what, events, |event| {
        matches!(event, EngineEvent::AttemptSettled { job_id: j, number: n, state: s, .. }
            if j.to_string() == job_id && *n == number && *s == state)
    })
    .await;
}

/// Waits (on engine events, not sleeps) for an event `wanted` accepts;
/// panics after 10 s, naming `what` it waited for.
pub async fn wait_for_event(
    what: &str,
    events: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    wanted: impl Fn(&EngineEvent) -> bool,
) {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(event) if wanted(&event) => return,
                Ok(_) => {}
                Err(err) => panic!("event stream: {err}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never seen: {what}"))
}

/// `GET /v1/jobs/{id}` with `Prefer: wait=10`: returns once the job left
/// `pending`/`running`.
pub async fn settled_job(gw: &TestGateway, api_key: &str, job_id: &str) -> Value {
    let response = gw
        .request(Method::GET, &format!("/v1/jobs/{job_id}"), api_key)
        .header("prefer", "wait=10")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// `POST {base_url}/v1/jobs` as alice under `key`, with `Prefer: wait=10`
/// and the `extra` headers: the job as answered once it settled.
pub async fn create_settled(base_url: &str, key: &str, body: &Value, extra: &[(&str, String)]) -> Value {
    let mut request = client()
        .post(format!("{base_url}/v1/jobs"))
        .bearer_auth(ALICE)
        .header("idempotency-key", key)
        .header("prefer", "wait=10");
    for (name, value) in extra {
        request = request.header(*name, value);
    }
    request.json(body).send().await.unwrap().json().await.unwrap()
}

/// The job a compatible door's response names.
pub fn job_of(response: &Response) -> String {
    response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned()
}

/// What the simulator counted at `path`.
pub fn calls_at(gw: &TestGateway, path: &str) -> u64 {
    gw.sim().calls().by_path.get(path).copied().unwrap_or(0)
}

/// A metric's value from `GET /metrics`, 0 when it is not there yet.
pub async fn metric(gw: &TestGateway, series: &str) -> f64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// The job `key` names (alice's), once settled.
pub async fn job_of_key(gw: &TestGateway, key: &str) -> Value {
    let found: Value = gw.get(ALICE, &format!("/v1/jobs?idempotency_key={key}")).await.json().await.unwrap();
    let id = found["id"].as_str().or(found["jobs"][0]["id"].as_str()).unwrap().to_owned();
    settled_job(gw, ALICE, &id).await
}

/// The job's attempts, after asserting the simulator saw exactly one
/// upstream call per attempt (every call carries the job id as its key).
pub async fn one_call_per_attempt(gw: &TestGateway, job: &str) -> Vec<Value> {
    let view = settled_job(gw, ALICE, job).await;
    let attempts = view["attempts"].as_array().unwrap().clone();
    assert_eq!(gw.sim().calls().by_key.get(job).copied(), Some(attempts.len() as u64), "{view}");
    attempts
}

/// The data of a stream's events that are JSON (OpenAI's `[DONE]` left out).
pub fn chunks_of(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

pub fn chat_body(text: &str) -> Value {
    serde_json::json!({
        "route": "chat",
        "input": {"messages": [{"role": "user", "content": text}]},
        "params": {"temperature": 0}
    })
}

/// Asserts an RFC 9457 problem response with the given status and slug and
/// returns its body.
pub async fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status");
    assert_eq!(
        response.headers().get("content-type").map(|v| v.to_str().unwrap()),
        Some("application/problem+json"),
        "content type"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["type"],
        format!("{}{slug}", intentgate::api::PROBLEM_TYPE_BASE),
        "problem type in {body}"
    );
    assert_eq!(body["status"], status);
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()), "detail in {body}");
    body
}

/// A loopback port free right now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The `intentgate` binary, serving on a free loopback port.
pub struct Spawned {
    pub child: tokio::process::Child,
    pub url: String,
    /// Everything it logged so far (it keeps being collected).
    pub logs: std::sync::Arc<std::sync::Mutex<String>>,
}

/// `intentgate serve --config <config>`, as [`spawn_binary`] starts it.
pub async fn spawn_serve(config: &Path) -> Spawned {
    spawn_binary(&["serve", "--config", config.to_str().unwrap()], &[]).await
}

/// Starts `intentgate <args>` with `INTENTGATE_LISTEN` and
/// `INTENTGATE_SIMULATOR_LISTEN` on free ports (a gateway already running on
/// the shipped config's ports must not matter) and `env`, and returns once it
/// logged that it is listening (a signal, not a sleep). Its log is drained
/// into `logs` so the pipe never fills; an early exit panics with that log.
/// A free port can be taken by another test process between the moment it
/// is found and the moment the child binds it: refused so, the child is
/// started again on other ports.
pub async fn spawn_binary(args: &[&str], env: &[(&str, &str)]) -> Spawned {
    for _ in 0..4 {
        if let Some(spawned) = try_spawn_binary(args, env, false).await {
            return spawned;
        }
    }
    try_spawn_binary(args, env, true).await.unwrap()
}

/// One try of [`spawn_binary`]; `None` when a port it was given was taken
/// meanwhile (and `last` is false).
async fn try_spawn_binary(args: &[&str], env: &[(&str, &str)], last: bool) -> Option<Spawned> {
    use tokio::io::AsyncBufReadExt;
    let port = free_port();
    let sim_port = free_port();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_intentgate"));
    command
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("INTENTGATE_LISTEN", format!("127.0.0.1:{port}"))
        .env("INTENTGATE_SIMULATOR_LISTEN", format!("127.0.0.1:{sim_port}"))
        .env_remove("INTENTGATE_DATABASE_URL")
        .env_remove("INTENTGATE_CONFIG")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    loop {
        let Some(line) = lines.next_line().await.unwrap() else {
            let status = child.wait().await.unwrap();
            let logged = logs.lock().unwrap().clone();
            if !last && logged.contains("Address already in use") {
                return None;
            }
            panic!("intentgate exited before listening ({status}); its log:\n{logged}");
        };
        logs.lock().unwrap().push_str(&line);
        logs.lock().unwrap().push('\n');
        if line.contains("intentgate listening") {
            break;
        }
    }
    let collected = logs.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut logs = collected.lock().unwrap();
            logs.push_str(&line);
            logs.push('\n');
        }
    });
    Some(Spawned { child, url: format!("http://127.0.0.1:{port}"), logs })
}

/// A system program (`haproxy`, `pgbouncer`) on the PATH or in the sbin
/// directories Debian installs daemons in. Missing, the test FAILS if
/// `require_var` is `1` (CI sets it) and otherwise prints a loud SKIPPED
/// line and gets `None`.
pub fn system_binary(name: &str, require_var: &str, what: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let sbin = ["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from);
    let dirs = path.split(':').filter(|dir| !dir.is_empty()).map(PathBuf::from).chain(sbin);
    if let Some(found) = dirs.map(|dir| dir.join(name)).find(|candidate| candidate.is_file()) {
        return Some(found);
    }
    if std::env::var(require_var).is_ok_and(|v| v == "1") {
        panic!("{name} is required ({require_var}=1) but is not installed");
    }
    loud(&format!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: {what} — {name} is not installed\n\
         !!! apt-get install {name}; CI sets {require_var}=1.\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}

/// The betas Claude Code sends with its turns.
pub const CLAUDE_CODE_BETAS: &str = "claude-code-20250219,interleaved-thinking-2025-05-14";

/// Claude Code's captured turn (thinking, cache breakpoints), its thinking
/// signed by the simulator (which refuses any other signature), asking for
/// `model`.
pub fn claude_code_turn(model: &str) -> Value {
    let mut turn: Value = serde_json::from_str(include_str!("../bodies/claude_code_turn.json")).unwrap();
    intentgate_providers::sim::sign_thinking_blocks(&mut turn);
    turn["model"] = model.into();
    turn
}

/// Sends `turn` to the Messages door with Claude Code's headers, under `key`.
pub async fn send_as_claude_code(gw: &TestGateway, key: &str, turn: &Value) -> Response {
    gw.client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", CLAUDE_CODE_BETAS)
        .header("idempotency-key", key)
        .json(turn)
        .send()
        .await
        .unwrap()
}
