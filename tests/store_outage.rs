//! "A database that went away": the gateway answers 503 with a problem body,
//! stays up, stores nothing, and serves again when the database is back.
//! PostgreSQL is reached through a proxy the test switches off and on, so the
//! real server keeps serving every other test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::proxy::ToggleProxy;
use common::{ALICE, Backend, TestGateway, TestStore, assert_problem, chat_body};
use serde_json::Value;

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
    assert_problem(gw.get(ALICE, "/v1/jobs?idempotency_key=before").await, 503, "store-unavailable").await;
    assert_problem(gw.client.get(gw.url("/readyz")).send().await.unwrap(), 503, "store-unavailable").await;
    assert_eq!(gw.client.get(gw.url("/healthz")).send().await.unwrap().status(), 200, "the process stays up");

    proxy.set_up(true);
    let again = gw.create(ALICE, "during", &chat_body("b")).await;
    assert_eq!(again.status(), 201, "serves again; the key was not used up by the outage");
    let found: Value = gw.get(ALICE, "/v1/jobs?idempotency_key=before").await.json().await.unwrap();
    assert_eq!(found["id"], before["id"], "the job stored before the outage is still there");
    assert_eq!(gw.job_count().await, 2);
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
}
