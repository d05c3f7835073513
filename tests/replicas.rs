//! Several gateway instances on one database (R10), and a gateway killed in
//! the middle of an attempt (R5): one job, one upstream call, and an attempt
//! that may have been sent is `unknown`, never `failed`, never re-sent. A
//! provider one replica found dead is passed over by the others too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{
    ALICE, TestGateway, TestStore, chat_body, config_from_doc, set_engine, set_provider, test_config_doc,
};
use intentgate::store::Store;
use intentgate_providers::sim::Simulator;
use serde_json::Value;
use tokio::sync::Barrier;

store_matrix!(
    two_gateways_one_job_one_call,
    killed_gateway_leaves_the_attempt_unknown,
    sigterm_drains_a_late_answer_before_exit,
    a_provider_one_replica_saw_fail_is_passed_over_by_the_other,
);

/// SIGTERM while an attempt is `unknown` and its answer still to come: the
/// replica stops being ready first (`/readyz` 503 `draining`), keeps
/// listening, records the late answer as the job's result, and only then
/// exits. Once it stopped the listener at once: the attempt was abandoned
/// at `max_execution` and the next provider ran the intent a second time.
async fn sigterm_drains_a_late_answer_before_exit(store: TestStore) {
    let sim = Simulator::new(5).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("intentgate-drain-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut doc = test_config_doc(&store.url, Some(sim.addr()));
    set_provider(&mut doc, "sim-primary", "model", "sim:hold=late");
    common::set_route(&mut doc, "chat", "attempt_timeout", "200ms");
    let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
    server.insert("unready_delay".into(), "500ms".into());
    server.insert("drain_timeout".into(), "20s".into());
    let path = dir.join("draining.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let common::Spawned { mut child, url, logs } = common::spawn_serve(&path).await;
    let client = common::client();
    let created = client.post(format!("{url}/v1/jobs")).bearer_auth(ALICE).header("idempotency-key", "late");
    let created: Value = created.json(&chat_body("x")).send().await.unwrap().json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let job = client.get(format!("{url}/v1/jobs/{id}")).bearer_auth(ALICE).header("prefer", "wait=10");
    let job: Value = job.send().await.unwrap().json().await.unwrap();
    assert_eq!(job["status"], "unknown", "the answer is late: {job}");

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // The signal is handled a moment after `kill` returns: poll the
    // readiness until it turns (within the 500 ms it keeps serving).
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(450);
    let ready = loop {
        let ready = client.get(format!("{url}/readyz")).send().await.unwrap();
        if ready.status() == 503 || std::time::Instant::now() > deadline {
            break ready;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert_eq!(ready.status(), 503, "not ready once the signal arrives, while still serving");
    let ready: Value = ready.json().await.unwrap();
    assert!(ready["type"].as_str().unwrap().ends_with("/draining"), "{ready}");
    sim.release("late");
    let status =
        tokio::time::timeout(std::time::Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}; log:\n{}", logs.lock().unwrap());

    let direct =
        Store::connect(&common::config_from_doc(&test_config_doc(&store.url, None)).store).await.unwrap();
    let job = direct.job(id.parse().unwrap()).await.unwrap().unwrap();
    assert_eq!(job.status.to_string(), "succeeded", "the late answer is the result");
    let attempts = direct.attempts(job.id).await.unwrap();
    assert_eq!(attempts.len(), 1, "no second attempt: {attempts:?}");
    assert_eq!(sim.calls().total, 1, "one execution");
    assert!(logs.lock().unwrap().contains("drained"), "{}", logs.lock().unwrap());
    let _ = std::fs::remove_dir_all(dir);
}

/// 100 concurrent duplicates spread over two gateway instances sharing one
/// database → one job, one upstream call.
async fn two_gateways_one_job_one_call(store: TestStore) {
    const REQUESTS: usize = 100;
    let sim = Simulator::new(3).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut gateways = Vec::new();
    for name in ["gw-a", "gw-b"] {
        let mut doc = test_config_doc(&store.url, Some(sim.addr()));
        set_engine(&mut doc, "instance_id", name);
        gateways.push(Arc::new(TestGateway::start_with(config_from_doc(&doc)).await));
    }
    let barrier = Arc::new(Barrier::new(REQUESTS));
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let (gw, barrier) = (gateways[i % 2].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response = gw.create(ALICE, "shared-intent", &chat_body("charge card")).await;
                let status = response.status().as_u16();
                let job: Value = response.json().await.unwrap();
                (status, job["id"].as_str().unwrap().to_owned())
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let id = results[0].1.clone();
    assert!(results.iter().all(|(_, job)| *job == id), "one job id everywhere");
    assert_eq!(results.iter().filter(|(status, _)| *status == 201).count(), 1);
    let job = common::settled_job(&gateways[1], ALICE, &id).await;
    assert_eq!(job["status"], "succeeded");
    assert_eq!(gateways[0].job_count().await, 1);
    assert_eq!(sim.calls().total, 1, "one upstream call across both instances");
}

/// `kill -9` of a gateway process while its attempt is in flight: after a
/// restart (another instance id, so the lease must expire first) the attempt
/// is `unknown`, the job is not failed, and there is no second call.
async fn killed_gateway_leaves_the_attempt_unknown(store: TestStore) {
    let sim = Simulator::new(5).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("intentgate-kill-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let config_for = |instance: &str| {
        let mut doc = test_config_doc(&store.url, Some(sim.addr()));
        set_provider(&mut doc, "sim-primary", "model", "sim:hold=never-released");
        let mut engine = toml::Table::new();
        engine.insert("instance_id".into(), instance.into());
        engine.insert("lease_ttl".into(), "600ms".into());
        engine.insert("sweep_interval".into(), "100ms".into());
        doc.insert("engine".into(), engine.into());
        let path = dir.join(format!("{instance}.toml"));
        std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
        path
    };

    let doomed = config_for("doomed");
    let common::Spawned { child: mut first, url, .. } = common::spawn_serve(&doomed).await;
    let client = common::client();
    let created: Value = client
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(ALICE)
        .header("idempotency-key", "mid-flight")
        .json(&chat_body("wire the money"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    sim.wait_for_calls(1).await; // the request reached the provider
    first.start_kill().unwrap(); // SIGKILL: no shutdown, no cleanup
    first.wait().await.unwrap();

    let survivor = config_for("survivor");
    let common::Spawned { child: mut second, url, .. } = common::spawn_serve(&survivor).await;
    let job: Value = client
        .get(format!("{url}/v1/jobs/{id}"))
        .bearer_auth(ALICE)
        .header("prefer", "wait=10")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(job["status"], "unknown", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no new attempt");
    assert_eq!(job["attempts"][0]["state"], "unknown");
    assert_eq!(sim.calls().total, 1, "no second upstream call");
    second.start_kill().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// Cross-replica wake-ups need a database both replicas listen on: PostgreSQL
/// only (SQLite is one process, whose waiters its own engine wakes).
mod wake_ups {
    use std::time::{Duration, Instant};

    use super::common::{self, ALICE, TestGateway, TestStore, chat_body, config_from_doc, set_provider};
    use intentgate::engine::EngineEvent;
    use intentgate_providers::sim::Simulator;
    use serde_json::Value;
    use sqlx::Connection as _;
    use uuid::Uuid;

    /// Two gateways on one PostgreSQL, a job driven by A, its provider held.
    struct Pair {
        a: TestGateway,
        b: TestGateway,
        sim: intentgate_providers::sim::SimHandle,
    }

    async fn pair(store: &TestStore, tag: &str) -> Pair {
        let sim = Simulator::new(11).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut gateways = Vec::new();
        for name in ["wake-a", "wake-b"] {
            let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
            set_provider(&mut doc, "sim-primary", "model", format!("sim:hold={tag}"));
            let mut engine = toml::Table::new();
            engine.insert("instance_id".into(), format!("{name}-{}", Uuid::now_v7()).into());
            doc.insert("engine".into(), engine.into());
            gateways.push(TestGateway::start_with(config_from_doc(&doc)).await);
        }
        let b = gateways.pop().unwrap();
        let a = gateways.pop().unwrap();
        Pair { a, b, sim }
    }

    /// The `n` of B's listener connection once it listens.
    async fn listening(gw: &TestGateway, after: u64) -> u64 {
        let mut announcements = gw.gateway.engine.announcements();
        let live = tokio::time::timeout(
            Duration::from_secs(10),
            announcements.wait_for(|n| n.is_some_and(|n| n > after)),
        )
        .await
        .expect("the settled-job listener never connected")
        .unwrap();
        live.unwrap()
    }

    /// Creates a job on A (its provider call held) and has B wait on it
    /// with `Prefer: wait=10`; returns the job id and B's pending answer
    /// once B asked for the job's settle to be announced.
    async fn job_on_a_waited_on_b(
        pair: &Pair,
        key: &str,
    ) -> (String, tokio::task::JoinHandle<(Value, Instant)>) {
        let mut b_events = pair.b.events();
        let created = pair.a.create(ALICE, key, &chat_body("wake me")).await;
        assert_eq!(created.status(), 201);
        let job: Value = created.json().await.unwrap();
        let id = job["id"].as_str().unwrap().to_owned();
        pair.sim.wait_for_calls(1).await; // A's attempt is on the wire, held
        let request = pair
            .b
            .request(reqwest::Method::GET, &format!("/v1/jobs/{id}"), ALICE)
            .header("prefer", "wait=10");
        let answer = tokio::spawn(async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            let job: Value = response.json().await.unwrap();
            (job, Instant::now())
        });
        seen("B awaiting the job", &mut b_events, awaiting(&id)).await;
        (id, answer)
    }

    /// Waits for the first event `wanted` accepts; returns when it was seen.
    async fn seen(
        what: &str,
        events: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
        wanted: impl Fn(&EngineEvent) -> bool,
    ) -> Instant {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match events.recv().await {
                    Ok(event) if wanted(&event) => return Instant::now(),
                    Ok(_) => {}
                    Err(err) => panic!("event stream: {err}"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("never seen: {what}"))
    }

    fn settled_on(job_id: &str) -> impl Fn(&EngineEvent) -> bool + '_ {
        move |event| {
            matches!(event, EngineEvent::AttemptSettled { job_id: j, state, .. }
                if j.to_string() == job_id && *state == intentgate::jobs::AttemptState::Succeeded)
        }
    }

    fn awaiting(job_id: &str) -> impl Fn(&EngineEvent) -> bool + '_ {
        move |event| matches!(event, EngineEvent::Awaiting { job_id: j } if j.to_string() == job_id)
    }

    fn announced(job_id: &str) -> impl Fn(&EngineEvent) -> bool + '_ {
        move |event| matches!(event, EngineEvent::Announced { job_id: j } if j.to_string() == job_id)
    }

    /// A waiter on replica B is woken by the settle on replica A through
    /// PostgreSQL's NOTIFY — not by its re-read — and answers the settled
    /// job. The time from A's settle to B's answer is reported, not asserted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn waiter_on_another_replica_is_woken_by_the_settle() {
        let Some(store) = TestStore::new(common::Backend::Postgres).await else { return };
        let pair = pair(&store, "wake-now").await;
        listening(&pair.b, 0).await;
        let (mut a_events, mut b_events) = (pair.a.events(), pair.b.events());
        let (id, answer) = job_on_a_waited_on_b(&pair, "wake-1").await;

        pair.sim.release("wake-now");
        // Each instant is taken as its event arrives (polled together).
        let (settled_at, announced_at, answered) = tokio::join!(
            seen("A settled the attempt", &mut a_events, settled_on(&id)),
            seen("B was announced the settle", &mut b_events, announced(&id)),
            answer
        );
        let (job, answered_at) = answered.unwrap();
        assert_eq!(job["status"], "succeeded", "{job}");
        common::loud(&format!(
            "\n=== cross-replica wake-up: A settled → B announced {:.2} ms → B answered {:.2} ms ===\n",
            ms(announced_at, settled_at),
            ms(answered_at, settled_at),
        ));
    }

    /// B's LISTEN connection is killed by the database: B polls meanwhile,
    /// listens again on a new connection, and a settle on A during or after
    /// the gap still reaches B's waiter (nothing is lost).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn listener_reconnects_and_nothing_is_lost_meanwhile() {
        let Some(store) = TestStore::new(common::Backend::Postgres).await else { return };
        let pair = pair(&store, "wake-later").await;
        let first = listening(&pair.b, 0).await;
        let (id, answer) = job_on_a_waited_on_b(&pair, "wake-2").await;

        // What a database restart does to the listener's connection.
        let mut admin = sqlx::PgConnection::connect(&common::pg_base_url()).await.unwrap();
        let name = format!("intentgate-listen {}", pair.b.gateway.engine.instance());
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&name)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert_eq!(killed, [true], "B's listener connection");
        pair.sim.release("wake-later"); // settles while B listens again, or just after
        let (job, _) = answer.await.unwrap();
        assert_eq!(job["status"], "succeeded", "{job}");
        listening(&pair.b, first).await;

        // And the new connection announces.
        pair.sim.reset(); // holds again
        let mut b_events = pair.b.events();
        let (id2, answer) = job_on_a_waited_on_b(&pair, "wake-3").await;
        assert_ne!(id, id2);
        pair.sim.release("wake-later");
        seen("B was announced the settle", &mut b_events, announced(&id2)).await;
        let (job, _) = answer.await.unwrap();
        assert_eq!(job["status"], "succeeded", "{job}");
    }

    /// The same wake-up between two `intentgate serve` processes: A drives
    /// the job, B's `Prefer: wait` waiter is woken through PostgreSQL. The
    /// settle's moment is when the test's own `LISTEN` connection hears its
    /// NOTIFY; A's and B's answers are timed from it, and reported, not
    /// asserted as times. What is asserted: B answers the settled job, and
    /// B's own log says the announcement reached it (its re-read backstop is
    /// 5 s away while it listens).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_processes_wake_each_other() {
        let Some(store) = TestStore::new(common::Backend::Postgres).await else { return };
        let sim = Simulator::new(13).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = std::env::temp_dir().join(format!("intentgate-wake-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut processes = Vec::new();
        for name in ["proc-a", "proc-b"] {
            let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
            set_provider(&mut doc, "sim-primary", "model", "sim:hold=two-processes".to_owned());
            let mut engine = toml::Table::new();
            engine.insert("instance_id".into(), format!("{name}-{}", Uuid::now_v7()).into());
            doc.insert("engine".into(), engine.into());
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
            let log = [("INTENTGATE_LOG", "info,intentgate::engine::remote=debug")];
            processes.push(common::spawn_binary(&["serve", "--config", path.to_str().unwrap()], &log).await);
        }
        let (a, b) = (&processes[0], &processes[1]);
        logged(b, "listening for jobs settled by other replicas").await;
        let client = common::client();
        let mut database = sqlx::PgConnection::connect(&store.url).await.unwrap();
        let mut settles = sqlx::postgres::PgListener::connect(&store.url).await.unwrap();
        settles.listen("intentgate_job_settled").await.unwrap();

        // A creates the job and waits on it; its provider call is held.
        let wait = |url: String, request: reqwest::RequestBuilder| {
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                assert!(response.status().is_success(), "{url}: {}", response.status());
                let job: Value = response.json().await.unwrap();
                (job, Instant::now())
            })
        };
        let on_a = wait(
            a.url.clone(),
            client
                .post(format!("{}/v1/jobs", a.url))
                .bearer_auth(ALICE)
                .header("idempotency-key", "wake-processes")
                .header("prefer", "wait=10")
                .json(&chat_body("wake me across processes")),
        );
        sim.wait_for_calls(1).await;
        let id: Uuid = sqlx::query_scalar("SELECT id FROM jobs").fetch_one(&mut database).await.unwrap();
        let on_b = wait(
            b.url.clone(),
            client.get(format!("{}/v1/jobs/{id}", b.url)).bearer_auth(ALICE).header("prefer", "wait=10"),
        );
        // B asked for the settle to be announced (`sql::MARK_AWAITED`): the
        // database's state is the only signal one process gives another.
        loop {
            let awaited: bool = sqlx::query_scalar("SELECT awaited FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&mut database)
                .await
                .unwrap();
            if awaited {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        sim.release("two-processes");
        // The channel is database-wide: other tests' schemas announce on it too.
        let settled_at = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let notification = settles.recv().await.unwrap();
                if notification.payload() == id.to_string() {
                    return Instant::now();
                }
            }
        })
        .await
        .expect("the settle was never announced");
        let ((a_job, a_at), (b_job, b_at)) = (on_a.await.unwrap(), on_b.await.unwrap());
        assert_eq!(a_job["status"], "succeeded", "{a_job}");
        assert_eq!(b_job["status"], "succeeded", "{b_job}");
        assert_eq!(a_job["result"], b_job["result"]);
        logged(b, &format!("announced: a job settled on another replica job_id={id}")).await;
        common::loud(&format!(
            "\n=== two processes: settle NOTIFY heard by the test → A answered {:.2} ms, B answered {:.2} ms ===\n",
            ms(a_at, settled_at),
            ms(b_at, settled_at),
        ));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Waits until the process logged a line containing `text`.
    async fn logged(process: &common::Spawned, text: &str) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !process.logs.lock().unwrap().contains(text) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("never logged {text:?}:\n{}", process.logs.lock().unwrap()));
    }

    fn ms(later: Instant, earlier: Instant) -> f64 {
        if later >= earlier {
            later.duration_since(earlier).as_secs_f64() * 1000.0
        } else {
            -(earlier.duration_since(later).as_secs_f64() * 1000.0)
        }
    }
}

/// Provider health is shared through the store: two replicas, a primary
/// that answers 503. Replica A sees it fail twice and opens its circuit;
/// replica B, which never called it, passes it over within a second, and
/// its request is answered by the fallback without a call to the primary.
async fn a_provider_one_replica_saw_fail_is_passed_over_by_the_other(store: TestStore) {
    let sim = Simulator::new(9).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut gateways = Vec::new();
    for name in ["gw-a", "gw-b"] {
        let mut doc = test_config_doc(&store.url, Some(sim.addr()));
        set_engine(&mut doc, "instance_id", name);
        set_provider(&mut doc, "sim-primary", "model", "sim:status=503");
        let mut health = toml::Table::new();
        health.insert("failures".into(), 2.into());
        health.insert("cooldown".into(), "60s".into());
        set_provider(&mut doc, "sim-primary", "health", health);
        gateways.push(TestGateway::start_with(config_from_doc(&doc)).await);
    }
    let (a, b) = (&gateways[0], &gateways[1]);
    let hello = serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "hello"}]});
    let primary_calls = || sim.calls().by_path.get("/v1/chat/completions").copied().unwrap_or(0);
    for key in ["a-1", "a-2"] {
        let response = a.chat_completion(key, &hello).await;
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
    }
    assert_eq!(primary_calls(), 2);
    assert_eq!(a.gateway.engine.provider_health("sim-primary").state, "cooling_down");

    let started = std::time::Instant::now();
    while b.gateway.engine.provider_health("sim-primary").state != "cooling_down" {
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "replica B never learned it");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let response = b.chat_completion("b-1", &hello).await;
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-fallback");
    assert_eq!(primary_calls(), 2, "B passed the primary over without calling it");
}
