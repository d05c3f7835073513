//! Vertex AI through the real `Provider` against the simulator over
//! loopback: Claude and Gemini at their project/location paths, the
//! service-account key traded for a token at its `token_uri` (cached,
//! refreshed once the simulator lets the first expire, one token fetch for
//! many calls), a static access token, and a wrong key or a refused token
//! classified as proven failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use intentgate_providers::sim::SimHandle;
use intentgate_providers::{
    Dialect, Failure, OutcomeClass, Provider, ProviderSettings, Publisher, Secret, VertexAddress,
    VertexCredentials,
};
use serde_json::Value;

const CLAUDE_PATH: &str =
    "/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929";

/// A key file for the simulator's account (or the wrong key) in a fresh temp file.
fn key_file(sim: &SimHandle, genuine: bool) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("intentgate-vertex-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(&path, sim.service_account_file(genuine)).unwrap();
    path
}

fn vertex(sim: &SimHandle, model: &str, credentials: VertexCredentials) -> Provider {
    let publisher = Publisher::of_model(model).unwrap();
    let mut config = ProviderSettings::new("vertex", publisher.dialect(), &sim.base_url_vertex(), model);
    config.timeouts = relaxed();
    config.vertex = Some(VertexAddress {
        project: "proj-1".into(),
        location: "us-east5".into(),
        publisher,
        credentials,
        token_uri: None,
    });
    Provider::new(config).unwrap()
}

fn calls_to(sim: &SimHandle, path: &str) -> u64 {
    sim.calls().by_path.get(path).copied().unwrap_or(0)
}

#[tokio::test]
async fn claude_is_sent_vertex_s_body_with_a_minted_token_fetched_once() {
    let sim = sim().await;
    let claude = vertex(&sim, "claude-sonnet-4-5@20250929", VertexCredentials::KeyFile(key_file(&sim, true)));
    for _ in 0..3 {
        let ctx = ctx();
        let response = claude.chat(&hello(), &ctx).await.unwrap();
        assert_eq!(response.text, "echo: hello there");
        let seen = sim.last_request(&ctx.job_id.to_string()).unwrap();
        let body = seen.body.unwrap();
        assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
        assert_eq!(body.get("model"), None, "the model is the path's");
        assert!(seen.headers["authorization"].starts_with("Bearer ya29.sim-"));
        assert!(!seen.headers.contains_key("anthropic-version"));
    }
    assert_eq!(calls_to(&sim, &format!("{CLAUDE_PATH}:rawPredict")), 3);
    assert_eq!(calls_to(&sim, "/token"), 1, "one token for every call");

    let (chunks, failure) = drain(&claude, &hello(), &ctx()).await.unwrap();
    assert_eq!(failure, None);
    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(text, "echo: hello there");
    assert_eq!(calls_to(&sim, &format!("{CLAUDE_PATH}:streamRawPredict")), 1);
}

#[tokio::test]
async fn a_token_the_simulator_expires_is_replaced_before_the_next_call() {
    let sim = sim().await;
    sim.expire_next_token();
    let claude = vertex(&sim, "claude-sonnet-4-5@20250929", VertexCredentials::KeyFile(key_file(&sim, true)));
    for _ in 0..3 {
        claude.chat(&hello(), &ctx()).await.unwrap();
    }
    assert_eq!(calls_to(&sim, "/token"), 2, "the first token expired after one use: one refresh");
    assert_eq!(calls_to(&sim, &format!("{CLAUDE_PATH}:rawPredict")), 3, "one call each");
}

#[tokio::test]
async fn gemini_on_vertex_answers_plain_and_streamed() {
    let sim = sim().await;
    let gemini =
        vertex(&sim, "gemini-2.5-pro", VertexCredentials::AccessToken(Secret::new(sim.mint_access_token())));
    assert_eq!(gemini.dialect(), Dialect::Gemini);
    let response = gemini.chat(&hello(), &ctx()).await.unwrap();
    assert_eq!(response.text, "echo: hello there");
    let (chunks, failure) = drain(&gemini, &hello(), &ctx()).await.unwrap();
    assert_eq!(failure, None);
    assert_eq!(chunks.iter().map(|c| c.delta.as_str()).collect::<String>(), "echo: hello there");
    let base = "/v1/projects/proj-1/locations/us-east5/publishers/google/models/gemini-2.5-pro";
    assert_eq!(calls_to(&sim, &format!("{base}:generateContent")), 1);
    assert_eq!(calls_to(&sim, &format!("{base}:streamGenerateContent")), 1);
    assert_eq!(calls_to(&sim, "/token"), 0, "a static token is never exchanged");
}

#[tokio::test]
async fn a_wrong_key_is_not_sent_and_a_refused_token_is_rejected() {
    let sim = sim().await;
    let wrong = vertex(&sim, "claude-sonnet-4-5@20250929", VertexCredentials::KeyFile(key_file(&sim, false)));
    let failure = wrong.chat(&hello(), &ctx()).await.unwrap_err();
    assert_eq!(failure.class(), OutcomeClass::NotSent, "{failure}");
    let Failure::NotSent { reason, .. } = &failure else { unreachable!() };
    assert!(reason.contains("Invalid JWT Signature"), "{reason}");
    assert!(!reason.contains("PRIVATE KEY"));
    assert_eq!(calls_to(&sim, &format!("{CLAUDE_PATH}:rawPredict")), 0, "the model was never called");

    let unknown = vertex(
        &sim,
        "claude-sonnet-4-5@20250929",
        VertexCredentials::AccessToken(Secret::new("ya29.forged")),
    );
    match unknown.chat(&hello(), &ctx()).await.unwrap_err() {
        Failure::Rejected { status: 401, body, .. } => {
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        }
        other => panic!("{other:?}"),
    }
}
