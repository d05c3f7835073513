//! The deployment of docs/deployment.md, run for real: three `intentgate
//! serve` processes on one PostgreSQL behind HAProxy (the shipped
//! `deploy/haproxy.cfg`, its checks on `/readyz`), a provider that takes
//! 0.3–1.5 s per answer, eight clients sending new intents through HAProxy
//! all along, and a rolling restart: each replica in turn gets SIGTERM,
//! stops being ready, is taken out by HAProxy while it still serves,
//! drains, exits, and starts again. Every request is answered, every job
//! settles, each is executed upstream exactly once, and each replica exits
//! within its drain bound.
//!
//! And the shutdown a person follows in the log: each step said, and a
//! second signal that ends the process at once.
//!
//! The rolling restart needs `haproxy` (Debian: `apt-get install haproxy`)
//! and PostgreSQL: missing, it FAILS if `INTENTGATE_REQUIRE_HAPROXY=1` (CI
//! sets it; `INTENTGATE_REQUIRE_PG=1` for the database) and otherwise
//! prints a loud SKIPPED line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{ALICE, TestStore, set_provider, test_config_doc};
use intentgate_providers::sim::Simulator;
use serde_json::{Value, json};
use uuid::Uuid;

/// The replicas' `[server] unready_delay`: longer than HAProxy takes to see
/// a 503 with the shipped checks (inter 1s + fastinter 250ms + timeout
/// check 500ms), as in `deploy/gateway.toml`.
const UNREADY_DELAY: Duration = Duration::from_secs(2);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENTS: usize = 8;

/// HAProxy on `deploy/haproxy.cfg`, started by this test; killed (by its
/// PID) when dropped.
struct HaProxy {
    child: tokio::process::Child,
    dir: PathBuf,
    url: String,
    stats: String,
}

impl HaProxy {
    /// The shipped template with this test's addresses filled in.
    async fn start(servers: &[(String, u16)]) -> Option<HaProxy> {
        let binary = common::system_binary("haproxy", "INTENTGATE_REQUIRE_HAPROXY", "cluster test")?;
        let template =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/haproxy.cfg"))
                .unwrap();
        let (listen, stats) = (common::free_port(), common::free_port());
        let lines: Vec<String> =
            servers.iter().map(|(name, port)| format!("    server {name} 127.0.0.1:{port}")).collect();
        let config = template
            .replace("{{listen}}", &format!("127.0.0.1:{listen}"))
            .replace("{{stats}}", &format!("127.0.0.1:{stats}"))
            .replace("{{servers}}", &lines.join("\n"));
        let dir = std::env::temp_dir().join(format!("intentgate-haproxy-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = tokio::process::Command::new(binary)
            .args(["-db", "-f", path.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("haproxy.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Some(HaProxy {
            child,
            dir,
            url: format!("http://127.0.0.1:{listen}"),
            stats: format!("http://127.0.0.1:{stats}/stats;csv"),
        })
    }

    /// HAProxy's stats of each server of the `replicas` backend (and of the
    /// backend itself, as `BACKEND`): column name → value.
    async fn stats(&self, client: &reqwest::Client) -> BTreeMap<String, BTreeMap<String, String>> {
        let Ok(response) = client.get(&self.stats).send().await else { return BTreeMap::new() };
        let text = response.text().await.unwrap_or_default();
        let mut lines = text.lines();
        let header: Vec<&str> =
            lines.next().unwrap_or_default().trim_start_matches("# ").split(',').collect();
        lines
            .map(|line| line.split(',').collect::<Vec<_>>())
            .filter(|fields| fields.first() == Some(&"replicas"))
            .map(|fields| {
                let row =
                    header.iter().zip(&fields).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
                (fields[1].to_owned(), row)
            })
            .collect()
    }

    /// HAProxy's state of `server` (`UP`, `DOWN`, `UP 1/2`…), `?` if unknown.
    async fn state(&self, client: &reqwest::Client, server: &str) -> String {
        self.stats(client).await.get(server).and_then(|row| row.get("status").cloned()).unwrap_or("?".into())
    }

    /// Polls until `server`'s state satisfies `wanted`; the time it took.
    async fn wait_state(
        &self,
        client: &reqwest::Client,
        server: &str,
        wanted: impl Fn(&str) -> bool,
    ) -> Duration {
        let began = Instant::now();
        loop {
            let state = self.state(client, server).await;
            if wanted(&state) {
                return began.elapsed();
            }
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "{server} stayed {state} in HAProxy:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One replica: a config file, a fixed port (HAProxy's server line), and
/// the process while it runs (killed on drop: `kill_on_drop`).
struct Replica {
    name: String,
    port: u16,
    config: PathBuf,
    process: Option<common::Spawned>,
}

impl Replica {
    async fn start(&mut self) {
        let listen = format!("127.0.0.1:{}", self.port);
        let args = ["serve", "--config", self.config.to_str().unwrap()];
        self.process = Some(common::spawn_binary(&args, &[("INTENTGATE_LISTEN", &listen)]).await);
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// What one client request came to.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug, in a failure's message
struct Answered {
    key: String,
    status: u16,
    job_id: Option<String>,
    /// A 503 naming its job was asked again under the same key this often.
    retried: u32,
    error: Option<String>,
}

/// A client's loop: new intents through HAProxy until `stop`, each under a
/// fresh key: a chat completion (which waits for its answer), or with
/// `native` a job created without waiting and then waited for by a `GET`
/// that HAProxy may send to another replica than the one driving it. A 503
/// that names its job (the job exists; only the same key is safe) is asked
/// again under that key.
async fn client_loop(
    client: reqwest::Client,
    url: String,
    id: usize,
    native: bool,
    stop: Arc<AtomicBool>,
) -> Vec<Answered> {
    let mut answered = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let key = format!("rolling-{id}-{n}");
        let mut retried = 0;
        let outcome = loop {
            let sent = if native {
                native_job(&client, &url, &key).await
            } else {
                let body = json!({"model": "chat", "messages": [{"role": "user", "content": key}]});
                client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(ALICE)
                    .header("idempotency-key", &key)
                    .json(&body)
                    .timeout(Duration::from_secs(30))
                    .send()
                    .await
            };
            let response = match sent {
                Ok(response) => response,
                Err(err) => {
                    break Answered { key, status: 0, job_id: None, retried, error: Some(err.to_string()) };
                }
            };
            let status = response.status().as_u16();
            let header =
                response.headers().get("x-intentgate-job-id").map(|v| v.to_str().unwrap().to_owned());
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            let job_id = header
                .or_else(|| answer["job_id"].as_str().map(str::to_owned))
                .or_else(|| answer["id"].as_str().map(str::to_owned));
            if status == 503 && job_id.is_some() && retried < 20 {
                retried += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let text = if native {
                answer["result"]["text"].as_str().unwrap_or_default()
            } else {
                answer["choices"][0]["message"]["content"].as_str().unwrap_or_default()
            };
            let error = (status != 200 || text != format!("echo: {key}")).then(|| answer.to_string());
            break Answered { key, status, job_id, retried, error };
        };
        answered.push(outcome);
    }
    answered
}

/// `POST /v1/jobs` without waiting, then `GET` the job with `Prefer: wait`:
/// the answer of the `GET` (or of the `POST`, when that failed).
async fn native_job(client: &reqwest::Client, url: &str, key: &str) -> reqwest::Result<reqwest::Response> {
    let created = client
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(ALICE)
        .header("idempotency-key", key)
        .json(&common::chat_body(key))
        .timeout(Duration::from_secs(30))
        .send()
        .await?;
    if !created.status().is_success() {
        return Ok(created);
    }
    let job: Value = created.json().await?;
    let id = job["id"].as_str().unwrap_or_default();
    client
        .get(format!("{url}/v1/jobs/{id}"))
        .bearer_auth(ALICE)
        .header("prefer", "wait=20")
        .timeout(Duration::from_secs(30))
        .send()
        .await
}

/// Three replicas behind HAProxy, restarted one after the other under a
/// steady load of new intents.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_behind_haproxy_loses_nothing() {
    let Some(store) = TestStore::new(common::Backend::Postgres).await else { return };
    let test_began = Instant::now();
    let sim = Simulator::new(23).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    // 0.3–1.5 s an answer: every call takes the next queued delay (one
    // each, a spread of them), then the model's own 0.9 s.
    let model = "sim:delay=900ms";
    let mut seed: u64 = 0x5eed;
    for _ in 0..1000 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = 300 + (seed >> 33) % 1201;
        sim.queue(Some(model), &format!("delay={delay}ms"), 1).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("intentgate-cluster-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut doc = test_config_doc(&store.url, Some(sim.addr()));
    set_provider(&mut doc, "sim-primary", "model", model);
    // A job of 2.5 s started on each replica just before its SIGTERM: one
    // drive certainly still running when its listener closes.
    let mut slow = toml::toml! {
        name = "sim-slow"
        dialect = "openai"
        model = "sim:delay=2500ms"
    };
    slow.insert("base_url".into(), sim.base_url_openai().into());
    doc.get_mut("providers").unwrap().as_array_mut().unwrap().push(slow.into());
    let route = toml::toml! {
        name = "slow"
        chain = ["sim-slow"]
        require_contract_for_primary = false
    };
    doc.get_mut("routes").unwrap().as_array_mut().unwrap().push(route.into());
    let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
    server.insert("unready_delay".into(), format!("{}ms", UNREADY_DELAY.as_millis()).into());
    server.insert("drain_timeout".into(), format!("{}s", DRAIN_TIMEOUT.as_secs()).into());
    let config = dir.join("replica.toml");
    std::fs::write(&config, toml::to_string(&doc).unwrap()).unwrap();
    let mut replicas: Vec<Replica> = (1..=3)
        .map(|i| Replica {
            name: format!("replica-{i}"),
            port: common::free_port(),
            config: config.clone(),
            process: None,
        })
        .collect();
    for replica in &mut replicas {
        replica.start().await;
    }

    let servers: Vec<(String, u16)> = replicas.iter().map(|r| (r.name.clone(), r.port)).collect();
    let Some(haproxy) = HaProxy::start(&servers).await else { return };
    let client = common::client();
    for replica in &replicas {
        haproxy.wait_state(&client, &replica.name, |state| state == "UP").await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let load_began = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            tokio::spawn(client_loop(client.clone(), haproxy.url.clone(), id, id % 4 == 3, stop.clone()))
        })
        .collect();

    let mut restarts = Vec::new();
    for replica in &mut replicas {
        // Let the load reach this replica first.
        let calls = sim.calls().total;
        tokio::time::timeout(Duration::from_secs(10), sim.wait_for_calls(calls + 2 * CLIENTS as u64))
            .await
            .expect("the load stalled");
        let replica_url = replica.url();
        let drive = common::client()
            .post(format!("{replica_url}/v1/jobs"))
            .bearer_auth(ALICE)
            .header("idempotency-key", format!("drained-on-{}", replica.name))
            .json(&json!({"route": "slow", "input": {"messages": [{"role": "user", "content": "drain me"}]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(drive.status(), 201);
        let drive = drive.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        while !sim.calls().by_key.contains_key(&drive) {
            tokio::time::sleep(Duration::from_millis(5)).await; // until its call is on the wire
        }
        let process = replica.process.as_mut().unwrap();
        let pid = process.child.id().unwrap().to_string();
        let signalled = Instant::now();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        // Not ready at once, while it still serves.
        let unready = loop {
            let ready = client.get(format!("{replica_url}/readyz")).send().await.unwrap();
            if ready.status() == 503 {
                let body: Value = ready.json().await.unwrap();
                assert!(body["type"].as_str().unwrap().ends_with("/draining"), "{body}");
                break signalled.elapsed();
            }
            assert!(
                signalled.elapsed() < UNREADY_DELAY,
                "{} still ready after its unready_delay",
                replica.name
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        haproxy.wait_state(&client, &replica.name, |state| !state.starts_with("UP")).await;
        let out = signalled.elapsed();
        assert!(
            out < UNREADY_DELAY,
            "HAProxy took {} out after {out:?}: later than its unready_delay, when it stops listening",
            replica.name
        );
        let bound = UNREADY_DELAY + DRAIN_TIMEOUT;
        let status = tokio::time::timeout(bound + Duration::from_secs(5), process.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit within {bound:?}", replica.name))
            .unwrap();
        let exited = signalled.elapsed();
        let log = process.logs.lock().unwrap().clone();
        assert!(status.success(), "{}: {status}; its log:\n{log}", replica.name);
        assert!(
            exited <= bound,
            "{} exited after {exited:?}, past unready_delay + drain_timeout",
            replica.name
        );
        assert!(
            log.contains("shutdown: drained; every drive and late answer settled"),
            "{}:\n{log}",
            replica.name
        );
        let drained =
            log.lines().find(|line| line.contains("shutdown: no new connections")).unwrap_or_default();
        let in_flight =
            drained.split("draining ").nth(1).and_then(|rest| rest.split(' ').next()).unwrap_or("?");
        assert!(in_flight.parse::<u32>().is_ok_and(|n| n >= 1), "the slow job's drive was drained:\n{log}");

        replica.start().await;
        haproxy.wait_state(&client, &replica.name, |state| state == "UP").await;
        let back = signalled.elapsed();
        restarts.push(format!(
            "{}: unready {:.0} ms, out of HAProxy {:.2} s, exited {:.2} s (drained {in_flight} drive(s)), UP again {:.2} s after the SIGTERM",
            replica.name,
            unready.as_secs_f64() * 1000.0,
            out.as_secs_f64(),
            exited.as_secs_f64(),
            back.as_secs_f64(),
        ));
    }
    stop.store(true, Ordering::SeqCst);
    let mut answered = Vec::new();
    for client in clients {
        answered.extend(client.await.unwrap());
    }
    let load_took = load_began.elapsed();

    // Every request answered: a 200 with its own echo (a 503 naming its job
    // was asked again under its key, and then answered).
    let failed: Vec<&Answered> = answered.iter().filter(|a| a.error.is_some()).collect();
    assert!(failed.is_empty(), "{} of {} requests failed: {failed:#?}", failed.len(), answered.len());
    let retried: u32 = answered.iter().map(|a| a.retried).sum();
    // Every job settled, each executed upstream exactly once.
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&store.url).await.unwrap();
    let jobs: Vec<(Uuid, String, String)> =
        sqlx::query_as("SELECT id, idempotency_key, status FROM jobs").fetch_all(&mut db).await.unwrap();
    assert_eq!(
        jobs.len(),
        answered.len() + replicas.len(),
        "one job per request, and the three drained ones"
    );
    let unsettled: Vec<_> = jobs.iter().filter(|(_, _, status)| status != "succeeded").collect();
    assert!(unsettled.is_empty(), "jobs not settled: {unsettled:?}");
    let by_key: BTreeMap<&str, &Uuid> = jobs.iter().map(|(id, key, _)| (key.as_str(), id)).collect();
    for a in &answered {
        assert_eq!(a.job_id.as_deref(), Some(by_key[a.key.as_str()].to_string().as_str()), "{a:?}");
    }
    let calls = sim.calls();
    let twice: Vec<_> =
        jobs.iter().filter(|(id, _, _)| calls.by_key.get(&id.to_string()) != Some(&1)).collect();
    assert!(twice.is_empty(), "jobs not executed exactly once upstream: {twice:?}");
    assert_eq!(calls.total, jobs.len() as u64, "no upstream call but the jobs' own");
    let backend = haproxy.stats(&client).await.remove("BACKEND").unwrap_or_default();
    let stat = |name: &str| backend.get(name).cloned().unwrap_or_default();

    common::loud(&format!(
        "\n=== rolling restart behind HAProxy: {} requests ({} jobs, {retried} re-asked after a 503) from {CLIENTS} clients over {:.1} s; \
         HAProxy: 5xx {}, retries {}, redispatches {}; test {:.1} s ===\n{}\n",
        answered.len(),
        jobs.len(),
        load_took.as_secs_f64(),
        stat("hrsp_5xx"),
        stat("wretr"),
        stat("wredis"),
        test_began.elapsed().as_secs_f64(),
        restarts.join("\n"),
    ));
    drop(haproxy);
    drop(replicas);
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGTERM with a drive in flight (its provider call held): each step is
/// logged; a second signal (SIGINT, as a second Ctrl-C) ends the process at
/// once, with status 1, saying what it leaves to the recovery sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_ends_the_shutdown_at_once() {
    let store = TestStore::new(common::Backend::Sqlite).await.unwrap();
    let sim = Simulator::new(29).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("intentgate-signals-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut doc = test_config_doc(&store.url, Some(sim.addr()));
    set_provider(&mut doc, "sim-primary", "model", "sim:hold=never");
    let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
    server.insert("unready_delay".into(), "100ms".into());
    server.insert("drain_timeout".into(), "60s".into());
    let path = dir.join("signals.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let common::Spawned { mut child, url, logs } = common::spawn_serve(&path).await;
    let created = common::client()
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(ALICE)
        .header("idempotency-key", "held")
        .json(&common::chat_body("hold me"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    sim.wait_for_calls(1).await; // the drive is on the wire

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let logged = |text: &'static str| {
        let logs = logs.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                while !logs.lock().unwrap().contains(text) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("never logged {text:?}:\n{}", logs.lock().unwrap()))
        }
    };
    logged("shutdown: SIGTERM received").await;
    logged("shutdown: closing the listener").await;
    logged("draining 1 drive(s) and 0 late-answer listener(s) for up to 60s").await;
    let second = Instant::now();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("a second signal must end the process at once, not after the 60 s drain")
        .unwrap();
    let took = second.elapsed();
    assert_eq!(status.code(), Some(1), "{status}; log:\n{}", logs.lock().unwrap());
    assert!(took < Duration::from_secs(2), "exited {took:?} after the second signal");
    // The process has exited; its last lines may still be on their way
    // through the pipe to the reader: wait for them, not for the exit.
    logged("shutdown: second signal (SIGINT): exiting now with status 1, without draining; 1 drive(s)").await;
    let log = logs.lock().unwrap().clone();
    assert!(!log.contains("shutdown: drained"), "nothing drained after the second signal:\n{log}");
    common::loud(&format!(
        "\n=== second signal: exited {:.0} ms after it ===\n",
        took.as_secs_f64() * 1000.0
    ));
    let _ = std::fs::remove_dir_all(dir);
}
