//! The Gemini dialect through the real `Provider` against the simulator
//! over loopback: what reaches Google's paths (the model's method, the key
//! in `x-goog-api-key`, `contents` and `systemInstruction`, function
//! declarations and responses), the answer and the stream in OpenAI's
//! shape, tool calls, the in-band safety block as a content refusal, and
//! every scripted fault classified as in the other dialects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use intentgate_providers::sim::SCRIPT_HEADER;
use intentgate_providers::{
    CallContext, ChatRequest, Dialect, Failure, OutcomeClass, Provider, Usage, assemble, class_of,
};
use serde_json::{Value, json};

fn gemini(sim: &intentgate_providers::sim::SimHandle, model: &str) -> Provider {
    provider(sim, Dialect::Gemini, model)
}

fn request(body: Value) -> ChatRequest {
    serde_json::from_value(body).unwrap()
}

/// A weather question offering two tools; `weather` comes first.
fn weather_request() -> ChatRequest {
    request(json!({
        "messages": [{"role": "user", "content": "Utrecht"}],
        "tools": [
            {"type": "function", "function": {"name": "weather", "description": "the weather in a city",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city", "days"]}}},
            {"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}
        ]
    }))
}

/// A stream's chunks a client sees, and the completion they add up to.
async fn streamed(provider: &Provider, req: &ChatRequest) -> (Vec<Value>, Value) {
    let (chunks, failure) = drain(provider, req, &ctx()).await.unwrap();
    assert_eq!(failure, None);
    let chunks: Vec<Value> = chunks.into_iter().map(|c| c.chunk).filter(|c| !c.is_null()).collect();
    let completion = assemble(&chunks);
    (chunks, completion)
}

#[tokio::test]
async fn a_call_reaches_the_model_s_method_with_the_key_in_its_header() {
    let sim = sim().await;
    let ctx = ctx();
    let response = gemini(&sim, "model-x").chat(&hello(), &ctx).await.unwrap();
    assert_eq!(response.text, "echo: hello there");
    assert_eq!(response.usage, Some(Usage { prompt_tokens: 4, completion_tokens: 3 }));
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(response.model.as_deref(), Some("model-x"), "modelVersion is the model");
    assert_eq!(response.completion["object"], "chat.completion");
    assert_eq!(response.completion["usage"]["total_tokens"], 7);
    let raw: Value = serde_json::from_slice(&response.raw).unwrap();
    assert!(raw.get("usageMetadata").is_some(), "raw is Gemini's own body: {raw}");

    let seen = sim.last_request(&ctx.job_id.to_string()).unwrap();
    assert_eq!(seen.path, "/v1beta/models/model-x:generateContent");
    assert_eq!(seen.query, None, "nothing in the query: never the key");
    assert_eq!(seen.headers.get("x-goog-api-key").map(String::as_str), Some(GEMINI_KEY));
    assert!(!seen.headers.contains_key("authorization"), "{:?}", seen.headers.keys());
    assert_eq!(seen.headers["idempotency-key"], ctx.job_id.to_string());
    assert_eq!(
        seen.body.unwrap(),
        json!({"systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [{"role": "user", "parts": [{"text": "hello there"}]}]})
    );
}

#[tokio::test]
async fn a_stream_arrives_as_openai_chunks_and_ends_with_its_body() {
    let sim = sim().await;
    let provider = gemini(&sim, "model-x");
    let mut req = hello();
    req.extra.insert("stream_options".into(), json!({"include_usage": true}));
    let ctx = ctx();
    let (chunks, failure) = drain(&provider, &req, &ctx).await.unwrap();
    assert_eq!(failure, None, "a stream that ends after its finishing chunk is complete");
    let seen = sim.last_request(&ctx.job_id.to_string()).unwrap();
    assert_eq!(seen.path, "/v1beta/models/model-x:streamGenerateContent");
    assert_eq!(seen.query.as_deref(), Some("alt=sse"));
    assert_eq!(chunks.iter().map(|c| c.delta.as_str()).collect::<String>(), "echo: hello there");
    assert!(chunks.len() > 3, "streamed in pieces");
    let finish = chunks.iter().find(|c| c.finish_reason.is_some()).unwrap();
    assert_eq!(finish.finish_reason.as_deref(), Some("stop"));
    assert_eq!(finish.usage, Some(Usage { prompt_tokens: 4, completion_tokens: 3 }));
    let shown: Vec<Value> = chunks.iter().map(|c| c.chunk.clone()).filter(|c| !c.is_null()).collect();
    assert_eq!(shown[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(shown[0]["model"], "model-x");
    let last = shown.last().unwrap();
    assert_eq!(last["choices"], json!([]), "the usage chunk, as asked: {last}");
    assert_eq!(last["usage"]["total_tokens"], 7);
    let assembled = assemble(&shown);
    assert_eq!(assembled["choices"][0]["message"]["content"], "echo: hello there");

    let (plain, _) = streamed(&provider, &hello()).await;
    assert!(plain.iter().all(|c| c.get("usage").is_none()), "no usage chunk unless asked for");
}

#[tokio::test]
async fn function_calls_arrive_as_tool_calls_plain_and_streamed() {
    let sim = sim().await;
    let provider = gemini(&sim, "sim:tool_call");
    let ctx = ctx();
    let response = provider.chat(&weather_request(), &ctx).await.unwrap();
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    let message = &response.completion["choices"][0]["message"];
    assert!(message["content"].is_null(), "{message}");
    let call = &message["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
    assert_eq!(call["function"]["name"], "weather");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Utrecht", "days": 1}), "valid against the declared schema");
    let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
    assert_eq!(
        sent["tools"],
        json!([{"functionDeclarations": [
            {"name": "weather", "description": "the weather in a city", "parameters": {"type": "OBJECT",
                "properties": {"city": {"type": "STRING"}, "days": {"type": "INTEGER"}}, "required": ["city", "days"]}},
            {"name": "clock"}
        ]}])
    );

    let (chunks, assembled) = streamed(&provider, &weather_request()).await;
    let streamed_call = &assembled["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(streamed_call["function"], call["function"]);
    assert_eq!(assembled["choices"][0]["finish_reason"], "tool_calls");
    assert!(chunks.iter().any(|c| c.pointer("/choices/0/delta/tool_calls/0/index") == Some(&json!(0))));

    let mut forced = weather_request();
    forced.extra.insert("tool_choice".into(), json!({"type": "function", "function": {"name": "clock"}}));
    let ctx = common::ctx();
    let response = provider.chat(&forced, &ctx).await.unwrap();
    assert_eq!(response.completion["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "clock");
    let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
    assert_eq!(
        sent["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["clock"]}})
    );
}

#[tokio::test]
async fn a_tool_round_trip_sends_the_result_as_a_function_response() {
    let sim = sim().await;
    let mut req = weather_request();
    req.messages = serde_json::from_value(json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Utrecht?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Utrecht\",\"days\":1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "light rain"}
    ]))
    .unwrap();
    req.extra.insert("tool_choice".into(), "auto".into());
    let ctx = ctx();
    let response = gemini(&sim, "sim:tool_call").chat(&req, &ctx).await.unwrap();
    assert_eq!(response.text, "echo: light rain", "the result reached the model, which answers in words");
    let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
    assert_eq!(sent["systemInstruction"], json!({"parts": [{"text": "be brief"}]}));
    assert_eq!(
        sent["contents"],
        json!([
            {"role": "user", "parts": [{"text": "weather in Utrecht?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Utrecht", "days": 1}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"output": "light rain"}}}]}
        ])
    );
    assert_eq!(sent["toolConfig"], json!({"functionCallingConfig": {"mode": "AUTO"}}));
}

#[tokio::test]
async fn a_json_schema_is_asked_for_and_followed() {
    let sim = sim().await;
    let mut req = request(json!({"messages": [{"role": "user", "content": "name the capital of France"}]}));
    let schema = json!({"type": "object", "additionalProperties": false,
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}}, "required": ["city"]});
    req.extra.insert(
        "response_format".into(),
        json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}),
    );
    let ctx = CallContext { expect_json: true, ..ctx() };
    let response = gemini(&sim, "m").chat(&req, &ctx).await.unwrap();
    let keys: Vec<&String> = response.json.as_ref().unwrap().as_object().unwrap().keys().collect();
    assert_eq!(keys, ["city", "country"]);
    let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
    assert_eq!(sent["generationConfig"]["responseMimeType"], "application/json");
    assert!(sent["generationConfig"]["responseSchema"].get("additionalProperties").is_none());
}

#[tokio::test]
async fn error_statuses_are_rejected_and_a_rate_limit_carries_its_retry_delay() {
    let sim = sim().await;
    for status in [500u16, 503, 400] {
        match gemini(&sim, &format!("sim:status={status}")).chat(&hello(), &ctx()).await {
            Err(Failure::Rejected { status: got, retry_after: None, body }) => {
                assert_eq!(got, status);
                assert!(body.contains("scripted failure"), "{body}");
            }
            other => panic!("{status}: {other:?}"),
        }
    }
    let limited = gemini(&sim, "sim:status=429;retry_after=2").chat(&hello(), &ctx()).await;
    assert!(
        matches!(&limited, Err(Failure::Rejected { status: 429, retry_after: Some(d), body })
            if *d == Duration::from_secs(2) && body.contains("RESOURCE_EXHAUSTED")),
        "Google's RetryInfo in the body is the wait: {limited:?}"
    );
    let streamed = gemini(&sim, "sim:status=429;retry_after=1").chat_stream(&hello(), &ctx()).await;
    assert!(matches!(streamed.err(), Some(Failure::Rejected { status: 429, retry_after: Some(_), .. })));
}

#[tokio::test]
async fn transport_faults_are_classified_as_in_every_dialect() {
    let sim = sim().await;
    let mut config = config(&sim, Dialect::Gemini, "plain-model");
    config.extra_headers.push((SCRIPT_HEADER.into(), "reset-before-body".into()));
    let outcome = Provider::new(config).unwrap().chat(&hello(), &ctx()).await;
    assert_eq!(class_of(&outcome), OutcomeClass::Unknown, "{outcome:?}");
    for (script, class) in [
        ("sim:reset-after-body", OutcomeClass::Unknown),
        ("sim:stream-cut", OutcomeClass::Unknown),
        ("sim:malformed-json", OutcomeClass::BadOutput),
    ] {
        let outcome = gemini(&sim, script).chat(&hello(), &ctx()).await;
        assert_eq!(class_of(&outcome), class, "{script}: {outcome:?}");
    }
    let mut config = common::config(&sim, Dialect::Gemini, "sim:hang");
    config.timeouts = short();
    let hung = Provider::new(config).unwrap().chat(&hello(), &ctx()).await;
    assert_eq!(class_of(&hung), OutcomeClass::Unknown, "{hung:?}");
}

#[tokio::test]
async fn stream_faults_are_classified_as_in_every_dialect() {
    let sim = sim().await;
    for (script, reason) in [("sim:stream-cut", "broke off"), ("sim:stream-stall", "stream_idle")] {
        let mut config = config(&sim, Dialect::Gemini, script);
        config.timeouts = short();
        let (chunks, failure) = drain(&Provider::new(config).unwrap(), &hello(), &ctx()).await.unwrap();
        assert!(!chunks.is_empty(), "{script}: some chunks arrived first");
        assert!(
            matches!(&failure, Some(Failure::Unknown { reason: got }) if got.contains(reason)),
            "{script}: {failure:?}"
        );
    }
    // Without the chunk that finishes it, the body's clean end is no end.
    let (_, failure) = drain(&gemini(&sim, "sim:stream-no-done"), &hello(), &ctx()).await.unwrap();
    assert!(
        matches!(&failure, Some(Failure::Unknown { reason }) if reason.contains("terminator")),
        "{failure:?}"
    );
    let (_, failure) = drain(&gemini(&sim, "sim:malformed-json"), &hello(), &ctx()).await.unwrap();
    assert_eq!(failure.map(|f| f.class()), Some(OutcomeClass::BadOutput));
    for (script, class) in
        [("sim:status=503", OutcomeClass::Rejected), ("sim:reset-after-body", OutcomeClass::Unknown)]
    {
        let result = gemini(&sim, script).chat_stream(&hello(), &ctx()).await;
        assert_eq!(result.err().map(|f| f.class()), Some(class), "{script}");
    }
}

#[tokio::test]
async fn a_safety_block_is_the_content_refusal_the_engine_knows() {
    let sim = sim().await;
    let blocked = gemini(&sim, "sim:content-policy");
    let outcome = blocked.chat(&hello(), &ctx()).await;
    assert!(outcome.as_ref().err().is_some_and(Failure::is_content_refusal), "{outcome:?}");
    let Err(Failure::Rejected { body, .. }) = outcome else { unreachable!() };
    assert!(body.contains("blockReason SAFETY") && body.contains("promptFeedback"), "{body}");
    let (chunks, failure) = drain(&blocked, &hello(), &ctx()).await.unwrap();
    assert!(chunks.is_empty() && failure.as_ref().is_some_and(Failure::is_content_refusal), "{failure:?}");

    let stopped = gemini(&sim, "sim:safety-stop");
    let outcome = stopped.chat(&hello(), &ctx()).await;
    assert!(outcome.as_ref().err().is_some_and(Failure::is_content_refusal), "nothing said: {outcome:?}");
    // Streamed, the part said before the stop reached the client: an answer
    // that ends for its content, as OpenAI ends one.
    let (chunks, assembled) = streamed(&stopped, &hello()).await;
    assert!(!chunks.is_empty());
    assert_eq!(assembled["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(sim.calls().total, 4);
}

#[tokio::test]
async fn the_key_stays_in_its_header_and_an_echoed_key_is_redacted() {
    let sim = sim().await;
    let provider = gemini(&sim, "sim:echo-auth");
    assert!(!format!("{provider:?}").contains(GEMINI_KEY));
    let response = provider.chat(&hello(), &ctx()).await.unwrap();
    assert!(response.text.contains("[redacted]"), "the key was echoed: {}", response.text);
    assert!(!String::from_utf8_lossy(&response.raw).contains(GEMINI_KEY));
    assert!(!response.completion.to_string().contains(GEMINI_KEY));

    let mut keyless = config(&sim, Dialect::Gemini, "m");
    keyless.api_key = None;
    let refused = Provider::new(keyless).unwrap().chat(&hello(), &ctx()).await;
    assert!(
        matches!(&refused, Err(Failure::Rejected { status: 403, .. })),
        "Google refuses no key: {refused:?}"
    );
}

#[tokio::test]
async fn overrides_are_in_gemini_s_terms_and_the_cap_holds_in_generation_config() {
    let sim = sim().await;
    let mut config = config(&sim, Dialect::Gemini, "m");
    config.request_overrides = json!({
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}],
        "generationConfig": {"temperature": 1.5, "topK": 5},
    })
    .as_object()
    .cloned()
    .unwrap();
    config.max_temperature = Some(0.2);
    let provider = Provider::new(config).unwrap();
    let mut req = hello();
    req.temperature = Some(0.9);
    let ctx = ctx();
    provider.chat(&req, &ctx).await.unwrap();
    let sent = sim.last_request(&ctx.job_id.to_string()).unwrap().body.unwrap();
    assert_eq!(sent["safetySettings"][0]["threshold"], "BLOCK_ONLY_HIGH");
    assert_eq!(sent["generationConfig"], json!({"temperature": 0.2, "topK": 5}), "the override, capped");
}

#[tokio::test]
async fn what_gemini_cannot_express_is_never_sent() {
    let sim = sim().await;
    let provider = gemini(&sim, "m");
    let mut req = hello();
    req.extra.insert("n".into(), 2.into());
    assert!(provider.cannot_express(&req).unwrap().contains("`n`"));
    assert!(matches!(provider.chat(&req, &ctx()).await, Err(Failure::NotSent { local: true, .. })));
    let mut unknown = hello();
    unknown.extra.insert("chat_template_kwargs".into(), json!({"enable_thinking": false}));
    assert_eq!(provider.cannot_express(&unknown), None, "a field neither translated nor refused passes");
    let refused = provider.chat(&unknown, &ctx()).await;
    assert!(
        matches!(&refused, Err(Failure::Rejected { status: 400, body, .. }) if body.contains("Unknown name")),
        "and Gemini refuses what it does not know: {refused:?}"
    );
    assert_eq!(sim.calls().total, 1, "only the passed-through field was sent");
    assert!(provider.cannot_embed().is_some());
}
