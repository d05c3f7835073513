//! Tool calls, several choices and usage details through the real
//! `Provider` against the simulator over loopback: plain and streamed, in
//! both dialects, and the Anthropic request translation as it arrives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use intentgate_providers::{ChatRequest, Dialect, Provider, assemble};
use serde_json::{Value, json};

/// A weather question offering two tools; `weather` comes first.
fn weather_request() -> ChatRequest {
    serde_json::from_value(json!({
        "messages": [{"role": "user", "content": "Utrecht"}],
        "tools": [
            {"type": "function", "function": {"name": "weather", "description": "the weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city", "days"]}}},
            {"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}
        ]
    }))
    .unwrap()
}

/// The streamed call's chunks (events meaningless to a client left out),
/// and the completion they assemble into.
async fn streamed(provider: &Provider, req: &ChatRequest) -> (Vec<Value>, Value) {
    let (chunks, failure) = drain(provider, req, &ctx()).await.unwrap();
    assert_eq!(failure, None);
    let chunks: Vec<Value> = chunks.into_iter().map(|c| c.chunk).filter(|c| !c.is_null()).collect();
    let completion = assemble(&chunks);
    (chunks, completion)
}

/// A tool call without its id (plain and streamed calls differ in it).
fn without_id(call: &Value) -> Value {
    let mut call = call.clone();
    call.as_object_mut().unwrap().remove("id");
    call
}

fn argument_fragments(chunks: &[Value]) -> usize {
    chunks
        .iter()
        .filter(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments").is_some_and(|a| a != ""))
        .count()
}

#[tokio::test]
async fn a_tool_call_plain_and_streamed_in_both_dialects() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let provider = provider(&sim, dialect, "sim:tool_call");
        let response = provider.chat(&weather_request(), &ctx()).await.unwrap();
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"), "{dialect}");
        assert_eq!(response.text, "");
        let message = &response.completion["choices"][0]["message"];
        assert!(message["content"].is_null(), "{dialect}: {message}");
        let call = &message["tool_calls"][0];
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "weather");
        let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"city": "Utrecht", "days": 1}), "{dialect}: valid against the schema");
        let id = call["id"].as_str().unwrap();
        assert!(id.starts_with(if dialect == Dialect::Anthropic { "toolu_" } else { "call_" }), "{id}");

        let (chunks, assembled) = streamed(&provider, &weather_request()).await;
        assert!(argument_fragments(&chunks) >= 2, "{dialect}: arguments arrive in pieces");
        let streamed_call = &assembled["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(without_id(streamed_call), without_id(call), "{dialect}");
        assert_eq!(assembled["choices"][0]["finish_reason"], "tool_calls");
    }
}

#[tokio::test]
async fn a_forced_or_scripted_tool_and_bad_arguments() {
    let sim = sim().await;
    let mut forced = weather_request();
    forced.extra.insert("tool_choice".into(), json!({"type": "function", "function": {"name": "clock"}}));
    for dialect in DIALECTS {
        let call = |model: &'static str, req: ChatRequest| {
            let provider = provider(&sim, dialect, model);
            async move {
                let response = provider.chat(&req, &ctx()).await.unwrap();
                let call = response.completion["choices"][0]["message"]["tool_calls"][0].clone();
                let arguments: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                (call["function"]["name"].as_str().unwrap().to_owned(), arguments)
            }
        };
        assert_eq!(call("sim:tool_call", forced.clone()).await.0, "clock", "{dialect}: tool_choice wins");
        assert_eq!(call("sim:tool=lookup", weather_request()).await, ("lookup".into(), json!({})));
        let (name, bad) = call("sim:tool_args=bad", weather_request()).await;
        assert_eq!(name, "weather");
        assert!(bad.get("city").is_none(), "{dialect}: a required property is missing: {bad}");
        assert!(!bad["days"].is_i64(), "{dialect}: and a property has the wrong type: {bad}");
    }
}

#[tokio::test]
async fn n_choices_plain_and_streamed() {
    let sim = sim().await;
    let provider = provider(&sim, Dialect::OpenAi, "m");
    let mut req = hello();
    req.extra.insert("n".into(), 2.into());
    let response = provider.chat(&req, &ctx()).await.unwrap();
    let choices = response.completion["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert_eq!(choices[0]["message"]["content"], "echo: hello there");
    assert_eq!(choices[1]["message"]["content"], "echo[1]: hello there");
    assert_eq!(choices[1]["index"], 1);
    assert_eq!(response.text, "echo: hello there", "text is choice 0's");

    let (chunks, assembled) = streamed(&provider, &req).await;
    let indexes: Vec<u64> =
        chunks.iter().filter_map(|c| c.pointer("/choices/0/index").and_then(Value::as_u64)).collect();
    assert!(indexes.windows(2).any(|w| w[0] != w[1] && w[1] == 0), "choices interleave: {indexes:?}");
    let texts: Vec<&Value> = (0..2).map(|i| &assembled["choices"][i]["message"]["content"]).collect();
    assert_eq!(texts, [&json!("echo: hello there"), &json!("echo[1]: hello there")]);
    assert_eq!(assembled["choices"][1]["finish_reason"], "stop");
}

#[tokio::test]
async fn usage_details_and_include_usage() {
    let sim = sim().await;
    let provider = provider(&sim, Dialect::OpenAi, "m");
    let response = provider.chat(&hello(), &ctx()).await.unwrap();
    let usage = &response.completion["usage"];
    assert_eq!(usage["prompt_tokens_details"], json!({"cached_tokens": 0}));
    assert_eq!(usage["completion_tokens_details"], json!({"reasoning_tokens": 0}));
    assert_eq!(usage["total_tokens"], 7);
    assert_eq!(response.completion["system_fingerprint"], "fp_sim");

    let (chunks, _) = streamed(&provider, &hello()).await;
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "no usage unless asked for");
    let mut req = hello();
    req.extra.insert("stream_options".into(), json!({"include_usage": true}));
    let (chunks, assembled) = streamed(&provider, &req).await;
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"], *usage);
    assert_eq!(assembled["usage"], *usage);
}

/// Both dialects report a stream's usage as OpenAI does: only when asked,
/// in a last chunk with no choices; the finish chunk's own `usage` field
/// (what the gateway charges by) carries it either way.
#[tokio::test]
async fn a_stream_shows_usage_only_when_asked_in_every_dialect() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let provider = provider(&sim, dialect, "m");
        let (chunks, _) = streamed(&provider, &hello()).await;
        assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{dialect}: no usage unless asked for");
        let mut req = hello();
        req.extra.insert("stream_options".into(), json!({"include_usage": true}));
        let (chunks, assembled) = streamed(&provider, &req).await;
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]), "{dialect}: {chunks:?}");
        assert!(last["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{dialect}: {last}");
        assert_eq!(assembled["usage"], last["usage"], "{dialect}");
        let finish = &chunks[chunks.len() - 2];
        assert!(
            finish["choices"][0]["finish_reason"].is_string() && finish.get("usage").is_none(),
            "{dialect}"
        );
    }
}

/// A conversation that called `weather` and has its result.
fn round_trip() -> ChatRequest {
    let mut req = weather_request();
    let messages = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Utrecht?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Utrecht\",\"days\":1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "light rain"}
    ]);
    req.messages = serde_json::from_value(messages).unwrap();
    req.extra.insert("tool_choice".into(), "auto".into());
    req.extra.insert("parallel_tool_calls".into(), false.into());
    req.extra.insert("stream_options".into(), json!({"include_usage": true}));
    req
}

#[tokio::test]
async fn a_tool_round_trip_reaches_the_provider_in_both_dialects() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let ctx = ctx();
        let response = provider(&sim, dialect, "sim:ok").chat(&round_trip(), &ctx).await.unwrap();
        assert_eq!(response.text, "echo: light rain", "{dialect}: the tool result reached the provider");
        let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
        if dialect == Dialect::OpenAi {
            assert_eq!(sent["messages"][3]["role"], "tool");
            continue;
        }
        if dialect == Dialect::OpenAiResponses {
            assert_eq!(sent["input"][0], json!({"role": "developer", "content": "be brief"}));
            assert_eq!(sent["input"][2]["type"], "function_call");
            assert_eq!(
                sent["input"][3],
                json!({"type": "function_call_output", "call_id": "call_1", "output": "light rain"})
            );
            assert_eq!(sent["tools"][0]["name"], "weather", "flat, as the Responses API has tools");
            continue;
        }
        assert_eq!(sent["system"], "be brief");
        assert_eq!(
            sent["messages"],
            json!([
                {"role": "user", "content": "weather in Utrecht?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "weather",
                    "input": {"city": "Utrecht", "days": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "light rain"}]}
            ])
        );
        assert_eq!(sent["tools"][0]["name"], "weather");
        assert_eq!(sent["tools"][0]["input_schema"]["required"], json!(["city", "days"]));
        assert_eq!(sent["tool_choice"], json!({"type": "auto", "disable_parallel_tool_use": true}));
        for dropped in ["parallel_tool_calls", "stream_options"] {
            assert!(sent.get(dropped).is_none(), "{dropped} is not sent: {sent}");
        }
    }
}

#[tokio::test]
async fn what_anthropic_cannot_express_is_never_sent() {
    let sim = sim().await;
    let anthropic = provider(&sim, Dialect::Anthropic, "m");
    let mut req = round_trip();
    req.messages[2].extra["tool_calls"][0]["function"]["arguments"] = "{\"city\":".into();
    assert!(anthropic.cannot_express(&req).unwrap().contains("not JSON"));
    assert!(provider(&sim, Dialect::OpenAi, "m").cannot_express(&req).is_none());
    let outcome = anthropic.chat(&req, &ctx()).await;
    assert!(matches!(outcome, Err(intentgate_providers::Failure::NotSent { .. })), "{outcome:?}");
    assert_eq!(sim.calls().total, 0);
}
