//! Many intents at once, each sent several times: on PostgreSQL their rows
//! share statements (`src/store/pg_batches.rs`), on SQLite commits (the
//! writer's group commit). Either way each intent is one job and one
//! upstream call, and every click of it gets that job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{ALICE, Backend, TestGateway, TestStore, chat_body, settled_job};
use serde_json::Value;
use tokio::sync::Barrier;

store_matrix!(concurrent_intents_each_run_once);

const INTENTS: usize = 40;
const CLICKS: usize = 3;

/// The sum of the samples of `name` with `write="<write>"` on `/metrics`.
async fn batch_counter(gw: &TestGateway, name: &str, write: &str) -> f64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let label = format!("write=\"{write}\"");
    text.lines()
        .filter(|line| line.starts_with(name) && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn concurrent_intents_each_run_once(store: TestStore) {
    let backend = store.backend;
    let gw = Arc::new(TestGateway::start(&store).await);
    let counters = |gw: Arc<TestGateway>| async move {
        (
            batch_counter(&gw, "intentgate_store_batches_total", "insert").await,
            batch_counter(&gw, "intentgate_store_batched_writes_total", "insert").await,
        )
    };
    let before = counters(gw.clone()).await;

    let barrier = Arc::new(Barrier::new(INTENTS * CLICKS));
    let tasks: Vec<_> = (0..INTENTS * CLICKS)
        .map(|n| {
            let (gw, barrier) = (gw.clone(), barrier.clone());
            let key = format!("intent-{}", n % INTENTS);
            tokio::spawn(async move {
                barrier.wait().await;
                let response = gw.create(ALICE, &key, &chat_body(&key)).await;
                let job: Value = response.json().await.unwrap();
                (key, job["id"].as_str().unwrap().to_owned())
            })
        })
        .collect();
    let mut ids: HashMap<String, Vec<String>> = HashMap::new();
    for task in tasks {
        let (key, id) = task.await.unwrap();
        ids.entry(key).or_default().push(id);
    }

    assert_eq!(ids.len(), INTENTS);
    for (key, clicks) in &ids {
        assert_eq!(clicks.len(), CLICKS);
        assert!(clicks.iter().all(|id| *id == clicks[0]), "every click of {key} gets one job: {clicks:?}");
        let job = settled_job(&gw, ALICE, &clicks[0]).await;
        assert_eq!(job["status"], "succeeded", "{key}: {job}");
        assert_eq!(gw.sim().calls().by_key.get(&clicks[0]).copied(), Some(1), "{key}: one upstream call");
    }
    assert_eq!(gw.job_count().await, INTENTS as i64);
    assert_eq!(gw.sim().calls().total, INTENTS as u64, "one upstream call per intent, none more");

    if backend == Backend::Postgres {
        let after = counters(gw.clone()).await;
        let (batches, written) = (after.0 - before.0, after.1 - before.1);
        common::loud(&format!(
            "=== {INTENTS}×{CLICKS} clicks: {written} job inserts in {batches} statements\n"
        ));
        assert!(written >= INTENTS as f64, "every new job went through the insert lane: {written}");
        assert!(written > batches, "some statement inserted more than one job: {written} in {batches}");
    }
}
