//! Several gateway instances on one database (R10), and a gateway killed in
//! the middle of an attempt (R5): one job, one upstream call, and an attempt
//! that may have been sent is `unknown`, never `failed`, never re-sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{ALICE, TestGateway, TestStore, chat_body, config_from_doc, set_provider, test_config_doc};
use intentgate_providers::sim::Simulator;
use serde_json::Value;
use tokio::sync::Barrier;

store_matrix!(two_gateways_one_job_one_call, killed_gateway_leaves_the_attempt_unknown);

/// 100 concurrent duplicates spread over two gateway instances sharing one
/// database → one job, one upstream call.
async fn two_gateways_one_job_one_call(store: TestStore) {
    const REQUESTS: usize = 100;
    let sim = Simulator::new(3).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut gateways = Vec::new();
    for name in ["gw-a", "gw-b"] {
        let mut doc = test_config_doc(&store.url, Some(sim.addr()));
        let engine = doc.entry("engine").or_insert(toml::Value::Table(Default::default()));
        engine.as_table_mut().unwrap().insert("instance_id".into(), name.into());
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
    let common::Spawned { child: mut first, url, .. } =
        common::spawn_binary(&["serve", "--config", doomed.to_str().unwrap()], &[]).await;
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
    let common::Spawned { child: mut second, url, .. } =
        common::spawn_binary(&["serve", "--config", survivor.to_str().unwrap()], &[]).await;
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
