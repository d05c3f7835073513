//! Shared helpers: a simulator on a loopback port and providers aimed at it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures_util::StreamExt;
use intentgate_providers::sim::{SimHandle, Simulator};
use intentgate_providers::{
    CallContext, ChatRequest, Dialect, Failure, Message, Provider, ProviderSettings, StreamChunk, Timeouts,
};
use uuid::Uuid;

/// The dialects whose loopback tests share a file; Gemini's are in `gemini.rs`.
pub const DIALECTS: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::OpenAiResponses];

/// The key a Gemini provider is configured with (the simulator, as Google,
/// refuses a Gemini call without one).
pub const GEMINI_KEY: &str = "gemini-test-key-0123456789";

pub async fn sim() -> SimHandle {
    Simulator::new(42).record_bodies(true).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// Timeouts generous enough that a loaded CI box never trips them by accident.
pub fn relaxed() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        first_byte: Duration::from_secs(10),
        total: Duration::from_secs(20),
        stream_idle: Duration::from_secs(10),
    }
}

/// Timeouts for tests whose point is that one of them expires.
pub fn short() -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(50),
        first_byte: Duration::from_millis(60),
        total: Duration::from_millis(200),
        stream_idle: Duration::from_millis(60),
    }
}

/// A plain client for the simulator's admin routes.
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub fn base_url(sim: &SimHandle, dialect: Dialect) -> String {
    match dialect {
        Dialect::OpenAi | Dialect::OpenAiResponses => sim.base_url_openai(),
        Dialect::Anthropic => sim.base_url_anthropic(),
        Dialect::Gemini => sim.base_url_gemini(),
        Dialect::Bedrock | Dialect::BedrockConverse => sim.base_url_bedrock(),
    }
}

pub fn config(sim: &SimHandle, dialect: Dialect, model: &str) -> ProviderSettings {
    let mut config =
        ProviderSettings::new(&format!("sim-{dialect}"), dialect, &base_url(sim, dialect), model);
    config.timeouts = relaxed();
    if dialect == Dialect::Gemini {
        config.api_key = Some(intentgate_providers::Secret::new(GEMINI_KEY));
    }
    if matches!(dialect, Dialect::Bedrock | Dialect::BedrockConverse) {
        config.bedrock = Some(bedrock_address(intentgate_providers::sim::BEDROCK_SECRET_ACCESS_KEY, None));
    }
    config
}

/// The simulator's AWS credentials (with another secret, or a session
/// token, when a test says), for region `us-east-1`.
pub fn bedrock_address(secret: &str, session_token: Option<&str>) -> intentgate_providers::BedrockAddress {
    use intentgate_providers::{Secret, bedrock::sigv4::Credentials};
    intentgate_providers::BedrockAddress {
        region: "us-east-1".into(),
        credentials: Some(Credentials {
            access_key_id: intentgate_providers::sim::BEDROCK_ACCESS_KEY_ID.into(),
            secret_access_key: Secret::new(secret),
            session_token: session_token.map(Secret::new),
        }),
    }
}

pub fn provider(sim: &SimHandle, dialect: Dialect, model: &str) -> Provider {
    Provider::new(config(sim, dialect, model)).unwrap()
}

pub fn ctx() -> CallContext {
    CallContext { job_id: Uuid::now_v7(), attempt: 1, expect_json: false, traceparent: None }
}

pub fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::system("be brief"), Message::user("hello there")])
}

/// Drains a stream: the chunks, and the failure that ended it, if any.
pub async fn drain(
    provider: &Provider,
    req: &ChatRequest,
    ctx: &CallContext,
) -> Result<(Vec<StreamChunk>, Option<Failure>), Failure> {
    let mut stream = provider.chat_stream(req, ctx).await?;
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => chunks.push(chunk),
            Err(failure) => {
                assert!(stream.next().await.is_none(), "a stream ends after its failure");
                return Ok((chunks, Some(failure)));
            }
        }
    }
    Ok((chunks, None))
}
