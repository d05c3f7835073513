//! The shipped `claude` route: the same Claude model on Anthropic's API,
//! then Amazon Bedrock, then Google Vertex AI — the failover chain for
//! Claude Code's traffic — driven with Claude Code's own request (a
//! thinking turn with cache breakpoints and betas) through the Messages
//! door, on both stores. A provider that hangs after taking the request
//! leaves its attempt `unknown` and nothing else is called (the default: no
//! second execution); a 529 fails over to Bedrock; Bedrock throttled fails
//! over to Vertex. Every call is counted at the simulator, one per attempt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, calls_at, job_of, one_call_per_attempt, settled_job};
use serde_json::Value;

store_matrix!(
    a_hanging_anthropic_api_is_unknown_and_nothing_else_is_called,
    an_overloaded_anthropic_api_fails_over_to_bedrock,
    bedrock_throttled_fails_over_to_vertex,
);

const ANTHROPIC: &str = "/v1/messages";
const VERTEX: &str = "/v1/projects/sim-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict";

/// The shipped config, with each named provider of the `claude` route
/// given `model` (a simulator script) and `fields`; no retries, so each
/// fault shows failover (or its refusal) at once.
async fn gateway(store: &TestStore, faults: &[(&str, &str)]) -> TestGateway {
    TestGateway::start_tweaked(store, |doc| {
        for provider in doc["providers"].as_array_mut().unwrap() {
            let provider = provider.as_table_mut().unwrap();
            if let Some((_, model)) = faults.iter().find(|(name, _)| provider["name"].as_str() == Some(name))
            {
                provider.insert("model".into(), (*model).into());
                provider.insert("first_byte_timeout".into(), "300ms".into());
            }
        }
        for route in doc["routes"].as_array_mut().unwrap() {
            if route["name"].as_str() == Some("claude") {
                route.as_table_mut().unwrap().insert("retries".into(), 0.into());
            }
        }
    })
    .await
}

/// Claude Code's turn, sent to the `claude` route with its headers.
async fn claude_code_turn(gw: &TestGateway, key: &str) -> reqwest::Response {
    common::send_as_claude_code(gw, key, &common::claude_code_turn("claude")).await
}

/// Calls at Bedrock's runtime, of any model.
fn bedrock_calls(gw: &TestGateway) -> u64 {
    gw.sim().calls().by_path.iter().filter(|(path, _)| path.starts_with("/model/")).map(|(_, n)| n).sum()
}

async fn a_hanging_anthropic_api_is_unknown_and_nothing_else_is_called(store: TestStore) {
    let gw = gateway(&store, &[("sim-claude", "sim:hang")]).await;
    let response = claude_code_turn(&gw, "cc-hang").await;
    let job = job_of(&response);
    assert!(!response.status().is_success(), "no answer: {}", response.status());
    let view = settled_job(&gw, ALICE, &job).await;
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{view}");
    assert_eq!(
        (attempts[0]["provider"].as_str(), attempts[0]["state"].as_str()),
        (Some("sim-claude"), Some("unknown"))
    );
    assert_eq!(calls_at(&gw, ANTHROPIC), 1);
    assert_eq!((bedrock_calls(&gw), calls_at(&gw, VERTEX)), (0, 0), "no second execution");
}

async fn an_overloaded_anthropic_api_fails_over_to_bedrock(store: TestStore) {
    let gw = gateway(&store, &[("sim-claude", "sim:status=529")]).await;
    let response = claude_code_turn(&gw, "cc-529").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-claude-bedrock");
    let job = job_of(&response);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message", "answered in the Messages API's own words");
    let attempts = one_call_per_attempt(&gw, &job).await;
    let providers: Vec<_> = attempts.iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(providers, ["sim-claude", "sim-claude-bedrock"]);
    assert_eq!((calls_at(&gw, ANTHROPIC), bedrock_calls(&gw), calls_at(&gw, VERTEX)), (1, 1, 0));
    let sent = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(sent["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(sent["thinking"]["type"], "adaptive", "the thinking turn passed through to Bedrock");
}

async fn bedrock_throttled_fails_over_to_vertex(store: TestStore) {
    let faults = [("sim-claude", "sim:status=529"), ("sim-claude-bedrock", "sim:status=429")];
    let gw = gateway(&store, &faults).await;
    let response = claude_code_turn(&gw, "cc-throttled").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-claude-vertex");
    let job = job_of(&response);
    let attempts = one_call_per_attempt(&gw, &job).await;
    let providers: Vec<_> = attempts.iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(providers, ["sim-claude", "sim-claude-bedrock", "sim-claude-vertex"]);
    let counted = (calls_at(&gw, ANTHROPIC), bedrock_calls(&gw), calls_at(&gw, VERTEX));
    assert_eq!(counted, (1, 1, 1));
    let sent = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
}
