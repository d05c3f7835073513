//! Pools of equivalent providers in a route's chain (`[[routes]] pools`),
//! over real HTTP against the simulator on loopback, on both stores: a
//! weighted pool splits jobs by its weights, a least-latency pool moves
//! traffic off a member that became slow, a failing member fails over to
//! the rest of its pool before the next step, and no job ever has two
//! attempts open. Which provider answered is read from each answer's
//! `x-intentgate-provider`, and upstream calls are counted at the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestGateway, TestStore};
use futures_util::StreamExt;
use serde_json::{Value, json};

store_matrix!(
    a_weighted_pool_splits_jobs_by_its_weights,
    a_least_latency_pool_moves_off_a_member_that_became_slow,
    a_failing_member_fails_over_to_its_pool_then_the_next_step,
);

/// A gateway with providers `pool-a` and `pool-b` (OpenAI dialect, models
/// `model_a` and `model_b`) pooled as the first step of route `pooled`,
/// whose second step is `sim-fallback`.
async fn gateway(store: &TestStore, model_a: &str, model_b: &str, pool: toml::Table) -> TestGateway {
    let (model_a, model_b) = (model_a.to_owned(), model_b.to_owned());
    TestGateway::start_tweaked(store, move |doc| {
        let providers = doc["providers"].as_array_mut().unwrap();
        let template = providers.iter().find(|p| p["name"].as_str() == Some("sim-primary")).unwrap().clone();
        for (name, model) in [("pool-a", &model_a), ("pool-b", &model_b)] {
            let mut provider = template.as_table().unwrap().clone();
            provider.insert("name".into(), name.into());
            provider.insert("model".into(), model.as_str().into());
            providers.push(provider.into());
        }
        let mut route = toml::Table::new();
        route.insert("name".into(), "pooled".into());
        route.insert(
            "chain".into(),
            toml::Value::Array(vec!["pool-a".into(), "pool-b".into(), "sim-fallback".into()]),
        );
        route.insert("pools".into(), toml::Value::Array(vec![pool.into()]));
        route.insert("require_contract_for_primary".into(), false.into());
        route.insert("require_contract_for_fallback".into(), false.into());
        route.insert("retry_statuses".into(), toml::Value::Array(vec![429.into()]));
        doc["routes"].as_array_mut().unwrap().push(route.into());
    })
    .await
}

fn pool(balance: &str, weights: Option<[i64; 2]>) -> toml::Table {
    let mut pool = toml::Table::new();
    pool.insert("members".into(), toml::Value::Array(vec!["pool-a".into(), "pool-b".into()]));
    pool.insert("balance".into(), balance.into());
    if let Some(weights) = weights {
        pool.insert("weights".into(), toml::Value::Array(weights.iter().map(|w| (*w).into()).collect()));
    }
    pool
}

/// Sends `count` new jobs on `pooled`, `parallel` at a time; the provider
/// that answered each.
async fn answered_by(gw: &TestGateway, prefix: &str, count: usize, parallel: usize) -> Vec<String> {
    futures_util::stream::iter(0..count)
        .map(|i| async move {
            let body =
                json!({"model": "pooled", "messages": [{"role": "user", "content": format!("job {i}")}]});
            let response = gw.chat_completion(&format!("{prefix}-{i}"), &body).await;
            assert_eq!(response.status(), 200);
            response.headers()["x-intentgate-provider"].to_str().unwrap().to_owned()
        })
        .buffer_unordered(parallel)
        .collect()
        .await
}

async fn a_weighted_pool_splits_jobs_by_its_weights(store: TestStore) {
    let gw = gateway(&store, "sim:ok", "sim:ok", pool("weighted", Some([3, 1]))).await;
    let providers = answered_by(&gw, "w", 2000, 16).await;
    let to_a = providers.iter().filter(|p| *p == "pool-a").count();
    let to_b = providers.iter().filter(|p| *p == "pool-b").count();
    assert_eq!(to_a + to_b, 2000, "every job on a member of the pool");
    // 3:1 is 75 %; within ±5 % of it is 1,425..=1,575 of 2,000.
    assert!((1425..=1575).contains(&to_a), "{to_a} of 2000 on the weight-3 member");
    assert_eq!(gw.sim().calls().total, 2000, "one upstream call per job");
}

async fn a_least_latency_pool_moves_off_a_member_that_became_slow(store: TestStore) {
    let gw = gateway(&store, "sim:delay=3ms", "sim:delay=2ms", pool("least_latency", None)).await;
    let warm = answered_by(&gw, "warm", 40, 1).await;
    assert!(warm.iter().any(|p| p == "pool-b"), "both members serve while both are fast: {warm:?}");
    // pool-b becomes ten times slower than pool-a.
    gw.sim().queue(Some("sim:delay=2ms"), "delay=30ms", 10_000).unwrap();
    let after = answered_by(&gw, "slow", 200, 1).await;
    let to_slow = after.iter().filter(|p| *p == "pool-b").count();
    assert!(to_slow <= 20, "{to_slow} of 200 jobs still went to the slow member");
    assert_eq!(gw.sim().calls().total, 240, "one upstream call per job");
}

async fn a_failing_member_fails_over_to_its_pool_then_the_next_step(store: TestStore) {
    let gw = gateway(&store, "sim:status=503", "sim:status=503", pool("weighted", None)).await;
    let body = json!({"model": "pooled", "messages": [{"role": "user", "content": "anyone?"}]});
    let response = gw.chat_completion("f-1", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-fallback");
    let job = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let job: Value = common::settled_job(&gw, common::ALICE, &job).await;
    let mut tried: Vec<&str> =
        job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(tried.pop(), Some("sim-fallback"), "the next step only after the whole pool");
    tried.sort_unstable();
    assert_eq!(tried, ["pool-a", "pool-b"], "each member once: {job}");
    assert_eq!(gw.sim().calls().total, 3);
}
