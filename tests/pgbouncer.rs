//! PostgreSQL through PgBouncer in transaction mode (`[store]
//! transaction_pooling`, `direct_url`): a real PgBouncer, started here in
//! front of the test database, pairs a client connection with a server
//! connection for one transaction at a time, and with few server
//! connections for many clients. Two gateways through it take a load of new
//! intents (each sent to both at once) with no error, and a waiter on one is
//! woken by the other's settle through `LISTEN` on the direct URL.
//!
//! Needs `pgbouncer` (Debian: `apt-get install pgbouncer`). When it is
//! missing the test FAILS if `INTENTGATE_REQUIRE_PGBOUNCER=1` (CI sets it)
//! and otherwise prints a loud SKIPPED line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ALICE, TestGateway, TestStore, chat_body, config_from_doc, set_provider, test_config_doc};
use intentgate::engine::EngineEvent;
use intentgate_providers::sim::Simulator;
use serde_json::Value;
use uuid::Uuid;

/// Server connections PgBouncer opens to PostgreSQL: far fewer than the
/// two gateways' 16 client connections, so each server connection serves
/// many clients in turn.
const SERVER_CONNECTIONS: u32 = 3;

/// A PgBouncer process of this test's; killed (by its PID) when dropped.
struct PgBouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
    log: PathBuf,
}

impl PgBouncer {
    /// PgBouncer in transaction mode on a free loopback port, in front of
    /// the test database. `store`'s schema is set on every server
    /// connection (`connect_query`): PgBouncer 1.18 refuses the `options`
    /// startup parameter that gives other tests their schema.
    fn start(store: &TestStore) -> Option<PgBouncer> {
        let binary = common::system_binary("pgbouncer", "INTENTGATE_REQUIRE_PGBOUNCER", "PgBouncer test")?;
        let direct = sqlx::postgres::PgConnectOptions::from_str(&store.url).unwrap();
        let schema = store.url.split("search_path%3D").nth(1).unwrap().split('&').next().unwrap();
        // Readable by the user PgBouncer runs as (it refuses to run as root).
        let dir = std::env::temp_dir().join(format!("intentgate-pgbouncer-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        set_mode(&dir, 0o755);
        let port = common::free_port();
        let user = direct.get_username();
        let ini = format!(
            "[databases]\n\
             intentgate = host={host} port={pg_port} dbname={db} connect_query='SET search_path = {schema}'\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = transaction\n\
             default_pool_size = {SERVER_CONNECTIONS}\n\
             max_client_conn = 200\n\
             server_lifetime = 3600\n",
            host = direct.get_host(),
            pg_port = direct.get_port(),
            db = direct.get_database().unwrap_or("test"),
            users = dir.join("users.txt").display(),
        );
        let ini_path = dir.join("pgbouncer.ini");
        std::fs::write(&ini_path, ini).unwrap();
        std::fs::write(dir.join("users.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        set_mode(&ini_path, 0o644);
        set_mode(&dir.join("users.txt"), 0o644);
        let log = dir.join("pgbouncer.log");
        let mut command = Command::new(binary);
        if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
            command.args(["-u", if user_exists("postgres") { "postgres" } else { "nobody" }]);
        }
        let child = command
            .arg(&ini_path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let bouncer = PgBouncer { child, dir, port, log };
        bouncer.wait_listening();
        Some(bouncer)
    }

    /// The URL of the test database through PgBouncer.
    fn url(&self, store: &TestStore) -> String {
        let direct = sqlx::postgres::PgConnectOptions::from_str(&store.url).unwrap();
        format!("postgres://{}@127.0.0.1:{}/intentgate", direct.get_username(), self.port)
    }

    /// Until the port accepts (its log says so a moment before), or 10 s.
    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer never listened; its log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|passwd| passwd.lines().any(|line| line.split(':').next() == Some(name)))
}

/// The test config through PgBouncer: `url` the pooler, `direct_url` the
/// database, `transaction_pooling` on; the providers on `sim`.
fn through_pgbouncer(
    store: &TestStore,
    bouncer: &PgBouncer,
    sim: std::net::SocketAddr,
    instance: &str,
) -> toml::Table {
    let mut doc = test_config_doc(&bouncer.url(store), Some(sim));
    let table = doc.get_mut("store").unwrap().as_table_mut().unwrap();
    table.insert("transaction_pooling".into(), true.into());
    table.insert("direct_url".into(), store.url.clone().into());
    table.insert("acquire_timeout".into(), "5s".into());
    let mut engine = toml::Table::new();
    engine.insert("instance_id".into(), format!("{instance}-{}", Uuid::now_v7()).into());
    doc.insert("engine".into(), engine.into());
    doc
}

/// Until the gateway's settled-job listener is connected.
async fn listening(gw: &TestGateway) {
    let mut announcements = gw.gateway.engine.announcements();
    tokio::time::timeout(Duration::from_secs(10), announcements.wait_for(|n| n.is_some()))
        .await
        .expect("the settled-job listener never connected (LISTEN on direct_url)")
        .unwrap();
}

/// Two gateways through PgBouncer in transaction mode: every intent of a
/// load (16 clients, each key sent to both gateways at once) is one job
/// with one upstream call, every request answered with the succeeded job;
/// then a `Prefer: wait` on B for a job A drives is woken by A's settle
/// (B's engine is announced it: its `LISTEN` on `direct_url` works).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_through_pgbouncer_in_transaction_mode() {
    let Some(store) = TestStore::new(common::Backend::Postgres).await else { return };
    let Some(bouncer) = PgBouncer::start(&store) else { return };
    let sim = Simulator::new(17).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut gateways = Vec::new();
    for name in ["pgb-a", "pgb-b"] {
        let mut doc = through_pgbouncer(&store, &bouncer, sim.addr(), name);
        set_provider(&mut doc, "sim-primary", "model", "sim:hold=pgb-wake");
        gateways.push(Arc::new(TestGateway::start_with(config_from_doc(&doc)).await));
    }
    sim.release("pgb-wake"); // answers at once until the wake-up below
    for gw in &gateways {
        listening(gw).await;
    }

    const CLIENTS: usize = 16;
    const KEYS_PER_CLIENT: usize = 10;
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let gateways = gateways.clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for n in 0..KEYS_PER_CLIENT {
                    let key = format!("pgb-{client}-{n}");
                    let body = chat_body(&key);
                    let post = |gw: &Arc<TestGateway>| {
                        gw.request(reqwest::Method::POST, "/v1/jobs", ALICE)
                            .header("idempotency-key", &key)
                            .header("prefer", "wait=10")
                            .json(&body)
                            .send()
                    };
                    let (a, b) = tokio::join!(post(&gateways[0]), post(&gateways[1]));
                    for response in [a, b] {
                        let response = response.unwrap();
                        let status = response.status().as_u16();
                        let job: Value = response.json().await.unwrap();
                        answers.push((key.clone(), status, job));
                    }
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for client in clients {
        answers.extend(client.await.unwrap());
    }
    let took = started.elapsed();
    let failed: Vec<_> = answers
        .iter()
        .filter(|(_, status, job)| !matches!(status, 200 | 201) || job["status"] != "succeeded")
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed, e.g. {:?}",
        failed.len(),
        answers.len(),
        failed.first()
    );
    let mut ids: Vec<&str> = answers.iter().map(|(_, _, job)| job["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), CLIENTS * KEYS_PER_CLIENT, "one job per key, whichever gateway took it");
    assert_eq!(answers.iter().filter(|(_, status, _)| *status == 201).count(), ids.len(), "one 201 per key");
    let calls = sim.calls();
    assert_eq!(calls.total, ids.len() as u64, "one upstream call per job");
    assert!(ids.iter().all(|id| calls.by_key.get(*id) == Some(&1)), "each job called once under its id");
    assert_eq!(gateways[0].job_count().await, ids.len() as i64);
    common::loud(&format!(
        "\n=== through PgBouncer (transaction mode, {SERVER_CONNECTIONS} server connections): {} requests, {} jobs in {:.2} s ===\n",
        answers.len(),
        ids.len(),
        took.as_secs_f64()
    ));

    // The wake-up across replicas: A drives the job (its call held), B waits.
    sim.reset(); // holds again
    let (a, b) = (&gateways[0], &gateways[1]);
    let mut b_events = b.events();
    let created = a.create(ALICE, "pgb-wake", &chat_body("wake me through the pooler")).await;
    assert_eq!(created.status(), 201);
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    sim.wait_for_calls(1).await;
    let waiting =
        b.request(reqwest::Method::GET, &format!("/v1/jobs/{id}"), ALICE).header("prefer", "wait=10");
    let answer = tokio::spawn(async move {
        let response = waiting.send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    });
    let job_id: Uuid = id.parse().unwrap();
    common::wait_for_event(
        "B awaiting the job",
        &mut b_events,
        |e| matches!(e, EngineEvent::Awaiting { job_id: j } if *j == job_id),
    )
    .await;
    let released = Instant::now();
    sim.release("pgb-wake");
    common::wait_for_event(
        "B announced the settle",
        &mut b_events,
        |e| matches!(e, EngineEvent::Announced { job_id: j } if *j == job_id),
    )
    .await;
    let job = answer.await.unwrap();
    assert_eq!(job["status"], "succeeded", "{job}");
    common::loud(&format!(
        "\n=== through PgBouncer: B woken by A's settle {:.1} ms after the release ===\n",
        released.elapsed().as_secs_f64() * 1000.0
    ));
    assert!(!bouncer.log().contains("ERROR"), "PgBouncer logged errors:\n{}", bouncer.log());
}

/// What `config check` and `serve` refuse: the settings on SQLite, a
/// transaction pooler without a direct URL, a direct URL that is not
/// PostgreSQL; and an unknown `[store]` key is still an error.
#[test]
fn transaction_pooling_settings_are_checked() {
    let doc = |store: &str| {
        let shipped =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gateway.toml"))
                .unwrap();
        let start = shipped.find("[store]").unwrap();
        let end = start + shipped[start..].find("\n[simulator]").unwrap();
        format!("{}[store]\n{store}{}", &shipped[..start], &shipped[end..])
    };
    let refused = |store: &str| {
        intentgate::config::Config::from_toml(Path::new("t.toml"), &doc(store))
            .map(drop)
            .unwrap_err()
            .to_string()
    };
    let pg = "url = \"postgres://u@pooler:6432/db\"\n";
    let cases = [
        (format!("{pg}transaction_pooling = true\n"), "store.transaction_pooling: needs store.direct_url"),
        (
            "url = \"sqlite://x.db\"\ntransaction_pooling = true\n".to_owned(),
            "store.transaction_pooling: applies to a postgres:// url only",
        ),
        (
            "url = \"sqlite://x.db\"\ndirect_url = \"postgres://u@db/db\"\n".to_owned(),
            "store.direct_url: applies to a postgres:// url only",
        ),
        (
            format!("{pg}transaction_pooling = true\ndirect_url = \"sqlite://x.db\"\n"),
            "store.direct_url: must be a postgres:// URL",
        ),
        (
            format!("{pg}direct_url = \"postgres://u@db:notaport/db\"\n"),
            "store.direct_url: not a valid database URL",
        ),
        (format!("{pg}pgbouncer = true\n"), "unknown field `pgbouncer`"),
    ];
    for (store, expected) in cases {
        let err = refused(&store);
        assert!(err.contains(expected), "{store:?}: {err}");
    }
    let ok = format!("{pg}transaction_pooling = true\ndirect_url = \"postgres://u@db:5432/db\"\n");
    let config = intentgate::config::Config::from_toml(Path::new("t.toml"), &doc(&ok)).unwrap();
    assert!(config.store.transaction_pooling);
    assert_eq!(config.store.session_url().0, "postgres://u@db:5432/db");

    // INTENTGATE_DATABASE_DIRECT_URL overrides the file, and errors name it.
    let path = std::env::temp_dir().join(format!("intentgate-pooling-{}.toml", Uuid::now_v7()));
    std::fs::write(&path, doc(&ok)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_intentgate"))
        .args(["config", "check", "--config", path.to_str().unwrap()])
        .env("INTENTGATE_DATABASE_DIRECT_URL", "mysql://nope")
        .env_remove("INTENTGATE_DATABASE_URL")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "INTENTGATE_DATABASE_DIRECT_URL (overrides store.direct_url): must be a postgres:// URL"
        ),
        "{stderr}"
    );
}
