//! The Bedrock dialect through the real `Provider` against the simulator
//! over loopback: the model id percent-encoded in `/model/{id}/invoke`,
//! the SigV4 signature the simulator recomputes (a wrong secret is its
//! 403), a Bedrock API key as a bearer token, Anthropic's body as Bedrock
//! takes it, the event-stream framed answer decoded, and each scripted
//! fault (throttling, a stream exception, a bad CRC) classified.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use intentgate_providers::sim::{BEDROCK_API_KEY, BEDROCK_SECRET_ACCESS_KEY, SimHandle};
use intentgate_providers::{ChatRequest, Dialect, Failure, Native, Protocol, Provider, Secret, assemble};
use serde_json::{Value, json};

const MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";

fn bedrock(sim: &SimHandle, model: &str) -> Provider {
    provider(sim, Dialect::Bedrock, model)
}

#[tokio::test]
async fn a_signed_call_reaches_the_encoded_model_path_with_bedrock_s_body() {
    let sim = sim().await;
    let mut config = config(&sim, Dialect::Bedrock, MODEL);
    config.bedrock = Some(bedrock_address(BEDROCK_SECRET_ACCESS_KEY, Some("session-token-1")));
    let ctx = ctx();
    let response = Provider::new(config).unwrap().chat(&hello(), &ctx).await.unwrap();
    assert_eq!(response.text, "echo: hello there");
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    let seen = sim.last_request(&ctx.job_id.to_string()).unwrap();
    assert_eq!(seen.path, "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke");
    let authorization = &seen.headers["authorization"];
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDSIMULATOR/"), "{authorization}");
    assert!(
        authorization.contains("/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"),
        "{authorization}"
    );
    assert_eq!(seen.headers["x-amz-security-token"], "session-token-1");
    assert!(!seen.headers.contains_key("anthropic-version"), "Bedrock reads the version from the body");
    let body = seen.body.unwrap();
    assert_eq!(body["anthropic_version"], "bedrock-2023-05-31");
    assert!(body.get("model").is_none() && body.get("stream").is_none(), "{body}");
    assert_eq!(body["system"], "be brief");
}

#[tokio::test]
async fn a_stream_is_decoded_from_event_stream_frames() {
    let sim = sim().await;
    let provider = bedrock(&sim, MODEL);
    let (chunks, failure) = drain(&provider, &hello(), &ctx()).await.unwrap();
    assert_eq!(failure, None);
    let chunks: Vec<Value> = chunks.into_iter().map(|c| c.chunk).filter(|c| !c.is_null()).collect();
    let completion = assemble(&chunks);
    assert_eq!(completion["choices"][0]["message"]["content"], "echo: hello there", "{completion}");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    let path = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream";
    assert_eq!(sim.calls().by_path.get(path), Some(&1));
}

#[tokio::test]
async fn a_forced_tool_call_is_answered_plain_and_streamed() {
    let sim = sim().await;
    let provider = bedrock(&sim, MODEL);
    let req: ChatRequest = serde_json::from_value(json!({
        "messages": [{"role": "user", "content": "Utrecht"}],
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "weather"}}
    }))
    .unwrap();
    let response = provider.chat(&req, &ctx()).await.unwrap();
    let call = &response.completion["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "weather", "{}", response.completion);
    let (chunks, failure) = drain(&provider, &req, &ctx()).await.unwrap();
    assert_eq!(failure, None);
    let chunks: Vec<Value> = chunks.into_iter().map(|c| c.chunk).filter(|c| !c.is_null()).collect();
    let streamed = assemble(&chunks);
    assert_eq!(streamed["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "weather");
    assert_eq!(streamed["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn a_wrong_secret_is_bedrock_s_403_and_an_api_key_is_a_bearer_token() {
    let sim = sim().await;
    let mut wrong = config(&sim, Dialect::Bedrock, MODEL);
    wrong.bedrock = Some(bedrock_address("not-the-secret", None));
    let failure = Provider::new(wrong).unwrap().chat(&hello(), &ctx()).await.unwrap_err();
    match failure {
        Failure::Rejected { status: 403, body, .. } => {
            assert!(body.contains("The request signature we calculated does not match"), "{body}")
        }
        other => panic!("{other:?}"),
    }

    for (key, ok) in [(BEDROCK_API_KEY, true), ("another-key", false)] {
        let mut config = config(&sim, Dialect::Bedrock, MODEL);
        config.bedrock =
            Some(intentgate_providers::BedrockAddress { region: "us-east-1".into(), credentials: None });
        config.api_key = Some(Secret::new(key));
        let ctx = ctx();
        let outcome = Provider::new(config).unwrap().chat(&hello(), &ctx).await;
        assert_eq!(outcome.is_ok(), ok, "{outcome:?}");
        let seen = sim.last_request(&ctx.job_id.to_string()).unwrap();
        assert_eq!(seen.headers["authorization"], format!("Bearer {key}"));
        assert!(!seen.headers.contains_key("x-amz-date"), "an API key is not signed");
    }
}

#[tokio::test]
async fn throttling_a_stream_exception_and_a_bad_crc_are_classified() {
    let sim = sim().await;
    let throttled = bedrock(&sim, "sim:status=429").chat(&hello(), &ctx()).await.unwrap_err();
    assert!(matches!(throttled, Failure::Rejected { status: 429, .. }), "{throttled:?}");

    let (chunks, failure) = drain(&bedrock(&sim, "sim:stream-exception"), &hello(), &ctx()).await.unwrap();
    assert!(!chunks.is_empty(), "half the answer came first");
    match failure {
        Some(Failure::Rejected { status: 424, body, .. }) => {
            assert!(body.starts_with("modelStreamErrorException"), "{body}")
        }
        other => panic!("{other:?}"),
    }

    let (_, failure) = drain(&bedrock(&sim, "sim:bad-crc"), &hello(), &ctx()).await.unwrap();
    assert!(
        matches!(&failure, Some(Failure::BadOutput { reason, .. }) if reason.contains("CRC")),
        "{failure:?}"
    );

    let mut config = config(&sim, Dialect::Bedrock, MODEL);
    config.answer_limits.max_event_bytes = 64;
    let (_, failure) = drain(&Provider::new(config).unwrap(), &hello(), &ctx()).await.unwrap();
    assert!(
        matches!(&failure, Some(Failure::BadOutput { reason, .. }) if reason.contains("max_event_bytes")),
        "{failure:?}"
    );
}

#[tokio::test]
async fn a_messages_request_passes_through_with_its_betas_in_the_body() {
    let sim = sim().await;
    let thinking = json!({"type": "thinking", "thinking": "Let me see.", "signature": "c2lnbmVk"});
    let mut body = json!({"model": "claude-x", "max_tokens": 512,
    "thinking": {"type": "enabled", "budget_tokens": 256},
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [thinking, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": [{"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}]}
    ]});
    intentgate_providers::sim::sign_thinking_blocks(&mut body);
    let native = Native {
        protocol: Protocol::AnthropicMessages,
        body: body.as_object().unwrap().clone(),
        headers: vec![
            ("anthropic-version".into(), "2023-06-01".into()),
            ("anthropic-beta".into(), "interleaved-thinking-2025-05-14, context-1m-2025-08-07".into()),
        ],
        untranslated: vec!["`thinking`".into()],
    };
    let mut req: ChatRequest =
        serde_json::from_value(json!({"messages": [{"role": "user", "content": "again"}]})).unwrap();
    req.native = Some(Arc::new(native));
    let provider = bedrock(&sim, MODEL);
    assert_eq!(provider.cannot_express(&req), None, "Bedrock speaks the Messages protocol");
    let ctx = ctx();
    let response = provider.chat(&req, &ctx).await.unwrap();
    assert_eq!(response.native.as_ref().unwrap()["type"], "message", "answered in its own words");
    let seen = sim.last_request(&ctx.job_id.to_string()).unwrap();
    let mut expected = body.clone();
    let fields = expected.as_object_mut().unwrap();
    fields.remove("model");
    fields.insert("anthropic_version".into(), "bedrock-2023-05-31".into());
    fields
        .insert("anthropic_beta".into(), json!(["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"]));
    assert_eq!(seen.body.unwrap(), expected, "as sent, but for what Bedrock moves into the body");
    assert!(!seen.headers.contains_key("anthropic-beta"));
}

/// The same faults through `Converse` (a model with a scripted name is
/// called there when the dialect says so): throttling is `rejected`, a
/// stream exception after half the answer `rejected` 424, a bad CRC and a
/// malformed event `bad_output`, a stream cut before its `metadata`
/// `unknown`; a whole stream decodes into the answer, its usage included.
#[tokio::test]
async fn converse_speaks_plain_and_streamed_and_classifies_each_fault() {
    let sim = sim().await;
    let converse = |model: &str| provider(&sim, Dialect::BedrockConverse, model);
    let first = ctx();
    let response = converse("meta.llama3-3-70b-instruct-v1:0").chat(&hello(), &first).await.unwrap();
    assert_eq!(response.text, "echo: hello there");
    let seen = sim.last_request(&first.job_id.to_string()).unwrap();
    assert_eq!(seen.path, "/model/meta.llama3-3-70b-instruct-v1%3A0/converse");
    assert_eq!(seen.body.unwrap()["system"], json!([{"text": "be brief"}]));

    let (chunks, failure) = drain(&converse("sim:ok"), &hello(), &ctx()).await.unwrap();
    assert_eq!(failure, None);
    assert!(chunks.iter().any(|chunk| chunk.usage.is_some()), "the finish chunk carries the usage");
    let chunks: Vec<Value> = chunks.into_iter().map(|c| c.chunk).filter(|c| !c.is_null()).collect();
    assert_eq!(assemble(&chunks)["choices"][0]["message"]["content"], "echo: hello there");

    let throttled = converse("sim:status=429").chat(&hello(), &ctx()).await.unwrap_err();
    assert!(matches!(throttled, Failure::Rejected { status: 429, .. }), "{throttled:?}");
    let (_, failure) = drain(&converse("sim:stream-exception"), &hello(), &ctx()).await.unwrap();
    assert!(matches!(failure, Some(Failure::Rejected { status: 424, .. })), "{failure:?}");
    for model in ["sim:bad-crc", "sim:malformed-json"] {
        let (_, failure) = drain(&converse(model), &hello(), &ctx()).await.unwrap();
        assert!(matches!(failure, Some(Failure::BadOutput { .. })), "{model}: {failure:?}");
    }
    let (_, failure) = drain(&converse("sim:stream-no-done"), &hello(), &ctx()).await.unwrap();
    assert!(matches!(failure, Some(Failure::Unknown { .. })), "{failure:?}");
}
