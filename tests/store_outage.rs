//! "A database that went away": the gateway answers 503 with a problem body,
//! stays up, stores nothing, and serves again when the database is back.
//! PostgreSQL is reached through a proxy the test switches off and on, so the
//! real server keeps serving every other test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::proxy::ToggleProxy;
use common::{ALICE, Backend, TestGateway, TestStore, assert_problem, chat_body};
use intentgate_providers::sim::Simulator;
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outage_gives_503_then_recovers() {
    let Some(store) = TestStore::new(Backend::Postgres).await else { return };
    let proxy = ToggleProxy::start(store.pg_host_port()).await;
    let gw = TestGateway::start_with(common::test_config(&store.url_via(&proxy.addr.to_string()))).await;
    let before = gw.create(ALICE, "before", &chat_body("a")).await;
    assert_eq!(before.status(), 201);
    let before: Value = before.json().await.unwrap();

    proxy.set_up(false);
    let response = gw.create(ALICE, "during", &chat_body("b")).await;
    assert_eq!(response.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    assert_problem(response, 503, "store-unavailable").await;
    let lookup =
        assert_problem(gw.get(ALICE, "/v1/jobs?idempotency_key=before").await, 503, "store-unavailable")
            .await;
    let by_id = gw.get(ALICE, &format!("/v1/jobs/{}", before["id"].as_str().unwrap())).await;
    let by_id = assert_problem(by_id, 503, "store-unavailable").await;
    for problem in [&lookup, &by_id] {
        assert_eq!(problem.get("stored"), None, "a lookup cannot say what exists: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(!detail.contains("no provider was called"), "a lookup cannot know that: {detail}");
        assert!(detail.contains("new Idempotency-Key"), "warns against a new key: {detail}");
    }
    assert_problem(gw.client.get(gw.url("/readyz")).send().await.unwrap(), 503, "store-unavailable").await;
    assert_eq!(gw.client.get(gw.url("/healthz")).send().await.unwrap().status(), 200, "the process stays up");

    proxy.set_up(true);
    let again = gw.create(ALICE, "during", &chat_body("b")).await;
    assert_eq!(again.status(), 201, "serves again; the key was not used up by the outage");
    let found: Value = gw.get(ALICE, "/v1/jobs?idempotency_key=before").await.json().await.unwrap();
    assert_eq!(found["id"], before["id"], "the job stored before the outage is still there");
    assert_eq!(gw.job_count().await, 2);
}

/// A request that waits for the job it created (`Prefer: wait`, or the
/// OpenAI surface's own wait) when the store goes away: the job was stored
/// and sent to its provider, so the 503 must not say that nothing was
/// stored. It names the job and says to retry under the same key, which
/// then finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outage_while_a_new_job_waits_names_the_job() {
    outage_while_waiting("/v1/jobs", chat_body("a"), Some("wait=5")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outage_while_a_chat_completion_waits_names_the_job() {
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "a"}]});
    outage_while_waiting("/v1/chat/completions", body, None).await;
}

async fn outage_while_waiting(path: &str, body: Value, prefer: Option<&str>) {
    let Some(store) = TestStore::new(Backend::Postgres).await else { return };
    let proxy = ToggleProxy::start(store.pg_host_port()).await;
    let sim = Simulator::new(7).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut doc = common::test_config_doc(&store.url_via(&proxy.addr.to_string()), Some(sim.addr()));
    common::set_provider(&mut doc, "sim-primary", "model", "sim:hold=answer");
    // The chat door waits `[openai] wait` (60 s) for a job whose answer is
    // held until the store returns; five seconds show the same.
    let openai = doc.entry("openai").or_insert_with(|| toml::Table::new().into());
    openai.as_table_mut().unwrap().insert("wait".into(), "5s".into());
    let mut gw = TestGateway::start_with(common::config_from_doc(&doc)).await;
    gw.sim = Some(sim);

    let mut request = gw.request(Method::POST, path, ALICE).header("idempotency-key", "held").json(&body);
    if let Some(prefer) = prefer {
        request = request.header("prefer", prefer);
    }
    let waiting = tokio::spawn(request.send());
    // The provider has the call, so the job and its attempt are committed;
    // the store goes away before the answer can be.
    gw.sim().wait_for_calls(1).await;
    proxy.set_up(false);
    gw.sim().release("answer");
    let response = waiting.await.unwrap().unwrap();

    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let (job_header, location) = (header("x-intentgate-job-id"), header("location"));
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    let problem = assert_problem(response, 503, "store-unavailable").await;
    let id = problem["job_id"].as_str().unwrap_or_else(|| panic!("no job_id in {problem}"));
    assert_eq!(job_header.as_deref(), Some(id), "x-intentgate-job-id");
    assert_eq!(location, Some(format!("/v1/jobs/{id}")), "Location");
    let detail = problem["detail"].as_str().unwrap();
    assert!(!detail.contains("nothing was stored"), "the job was stored: {detail}");
    assert!(detail.contains(id), "names the job: {detail}");
    assert!(detail.contains("same Idempotency-Key"), "says to retry under the same key: {detail}");
    assert_eq!(problem["stored"], "yes", "{problem}");

    proxy.set_up(true);
    let found = gw.get(ALICE, "/v1/jobs?idempotency_key=held").await;
    assert_eq!(found.status(), 200);
    let found: Value = found.json().await.unwrap();
    assert_eq!(found["id"], id, "the same key finds the job that was stored");
}

/// The job's INSERT reaches PostgreSQL and commits, but its reply is lost
/// and the connection reset: the 503 must not say "nothing was stored" (a
/// client that trusted it and sent the intent again under a new key would
/// run it twice). It says the job may exist, names the key, and asks for a
/// retry under that key, which finds the one job. (SQLite's commit is a
/// local call that either happened or did not: it has no such case.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_commit_with_a_lost_reply_is_not_nothing_stored() {
    let Some(store) = TestStore::new(Backend::Postgres).await else { return };
    let proxy = ToggleProxy::start(store.pg_host_port()).await;
    let sim = Simulator::new(7).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    // In clear text, so the proxy can see which statement passes it.
    let url = store.url_via(&proxy.addr.to_string());
    let url = format!("{url}{}sslmode=disable", if url.contains('?') { '&' } else { '?' });
    let doc = common::test_config_doc(&url, Some(sim.addr()));
    let mut gw = TestGateway::start_with(common::config_from_doc(&doc)).await;
    gw.sim = Some(sim);

    proxy.cut_reply_after("INSERT INTO jobs");
    let response = gw.create(ALICE, "lost-reply", &chat_body("a")).await;
    assert!(proxy.cut_fired(), "the job's INSERT went through the proxy");
    let problem = assert_problem(response, 503, "store-unavailable").await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(!detail.contains("nothing was stored"), "the job was stored: {detail}");
    assert!(detail.contains("same Idempotency-Key"), "{detail}");
    assert_eq!(problem["idempotency_key"], "lost-reply", "{problem}");
    assert_eq!(problem["stored"], "maybe", "machine-readable, not only in the detail: {problem}");
    assert_eq!(gw.job_count().await, 1, "the job was committed");

    let again = gw.create(ALICE, "lost-reply", &chat_body("a")).await;
    assert_eq!(again.status(), 200, "the retry under the same key finds the job");
    assert_eq!(gw.job_count().await, 1, "one intent, one job");
}

/// SQLite reads and writes use different connections: while the file's
/// write lock is held elsewhere (the writer thread stuck, as good as dead)
/// reads still answer, but the gateway is not ready — `/readyz` asks the
/// writer thread, and answers 503 within `acquire_timeout`. Ready again
/// once the lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_writer_that_cannot_write_is_not_ready() {
    let store = TestStore::new(Backend::Sqlite).await.unwrap();
    let mut doc = common::test_config_doc(&store.url, None);
    doc["store"].as_table_mut().unwrap().insert("acquire_timeout".into(), "300ms".into());
    let gw = TestGateway::start_with(common::config_from_doc(&doc)).await;
    let ready = || async { gw.client.get(gw.url("/readyz")).send().await.unwrap() };
    assert_eq!(ready().await.status(), 200);

    let path = store.url.strip_prefix("sqlite://").unwrap();
    let other = rusqlite::Connection::open(path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert_eq!(gw.get(ALICE, "/v1/jobs?idempotency_key=none").await.status(), 404, "reads still answer");
    let problem = assert_problem(ready().await, 503, "store-unavailable").await;
    assert!(problem["detail"].as_str().unwrap().contains("job store"), "{problem}");

    other.execute_batch("ROLLBACK").unwrap();
    assert_eq!(ready().await.status(), 200, "ready again once the writer can write");
}

/// A gateway whose PostgreSQL refuses connections at start-up cannot run its
/// migrations: start-up fails with an error that says the store is
/// unavailable (the supervisor restarts it), rather than panicking or
/// serving on an unmigrated schema.
#[tokio::test]
async fn unreachable_postgres_at_start_is_a_clear_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut config = common::test_config("postgres://postgres@127.0.0.1:1/test");
    config.store.url = format!("postgres://postgres@127.0.0.1:{port}/test");
    config.store.acquire_timeout = intentgate::config::HumanDuration(Duration::from_millis(300));
    let err = intentgate::app::start(config).await.err().expect("start must fail");
    assert!(err.to_string().contains("unavailable"), "{err}");
    assert!(err.to_string().contains("refused"), "says what happened, not that a pool timed out: {err}");
}

/// A database that does not exist is named as such at start-up.
#[tokio::test]
async fn a_missing_postgres_database_is_named_at_start() {
    let Some(store) = TestStore::new(Backend::Postgres).await else { return };
    let mut config = common::test_config(&store.url);
    config.store.url = format!("postgres://postgres@{}/intentgate_no_such_database", store.pg_host_port());
    let err = intentgate::app::start(config).await.err().expect("start must fail");
    assert!(err.to_string().contains("does not exist"), "{err}");
}
