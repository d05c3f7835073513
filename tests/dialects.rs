//! Tool-using conversations across dialects: the client speaks OpenAI's
//! chat completions; an Anthropic-dialect provider is told the same thing in
//! its own terms (tools, `tool_use`, `tool_result` blocks) and its answer
//! comes back in OpenAI's shape, so a route may fail over from one dialect to
//! the other in the middle of a conversation and the client cannot tell.
//! What a dialect cannot say (`n` > 1 on Anthropic) skips the provider with
//! the reason, never drops the field. Counts upstream calls at the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestGateway, TestStore, set_provider, set_route};
use serde_json::{Value, json};

store_matrix!(
    an_anthropic_tool_call_comes_back_in_openai_shape,
    failover_to_anthropic_in_the_middle_of_a_tool_conversation,
    a_dialect_that_cannot_express_the_request_is_passed_over,
);

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

/// The route's only provider speaks Anthropic and answers with a `tool_use`
/// block: the client gets an OpenAI tool call, plain and streamed.
async fn an_anthropic_tool_call_comes_back_in_openai_shape(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(doc, "chat", "chain", toml::Value::Array(vec!["sim-fallback".into()]));
        set_provider(doc, "sim-fallback", "model", "sim:tool_call");
    })
    .await;
    let body = json!({"model": "chat", "tools": weather_tool(),
        "messages": [{"role": "user", "content": "Weather in Utrecht?"}]});
    let response = gw.chat_completion("anthropic-tool", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-fallback");
    let answer: Value = response.json().await.unwrap();
    let message = &answer["choices"][0]["message"];
    assert!(message["content"].is_null(), "{answer}");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "get_weather");
    let arguments: Value =
        serde_json::from_str(message["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments["city"].is_string(), "{arguments}");
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");

    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    let events = gw.chat_completion("anthropic-tool-stream", &streamed).await.text().await.unwrap();
    let mut arguments = String::new();
    for data in events.lines().filter_map(|line| line.strip_prefix("data: ")).filter(|d| *d != "[DONE]") {
        let chunk: Value = serde_json::from_str(data).unwrap();
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    assert!(events.ends_with("data: [DONE]\n\n"), "{events}");
    let arguments: Value = serde_json::from_str(&arguments).unwrap();
    assert!(arguments["city"].is_string(), "streamed fragments assemble into the arguments: {arguments}");
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages").copied(), Some(2));
}

/// A conversation that already holds a tool round trip; the OpenAI-dialect
/// primary fails (503), the Anthropic fallback gets the conversation as
/// `tool_use` / `tool_result` blocks and answers; the client sees one
/// ordinary completion.
async fn failover_to_anthropic_in_the_middle_of_a_tool_conversation(store: TestStore) {
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_provider(doc, "sim-primary", "model", "sim:status=503"))
            .await;
    let body = json!({"model": "chat", "tools": weather_tool(), "messages": [
        {"role": "user", "content": "Weather in Utrecht?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Utrecht\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}
    ]});
    let response = gw.chat_completion("mid-conversation", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-fallback");
    let job_id = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let answer: Value = response.json().await.unwrap();
    assert!(answer["choices"][0]["message"]["content"].as_str().unwrap().contains("sunny, 21 C"), "{answer}");

    let seen = gw.sim().last_request(&job_id).unwrap().body.unwrap();
    assert_eq!(seen["tools"][0]["name"], "get_weather", "tools in Anthropic's terms: {seen}");
    assert_eq!(seen["tools"][0]["input_schema"]["required"], json!(["city"]));
    let messages = seen["messages"].as_array().unwrap();
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"][0]["type"], "tool_use");
    assert_eq!(messages[1]["content"][0]["input"], json!({"city": "Utrecht"}));
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "call_1");
    let calls = gw.sim().calls();
    assert_eq!(calls.by_path.get("/v1/chat/completions").copied(), Some(1), "the primary, once");
    assert_eq!(calls.by_path.get("/v1/messages").copied(), Some(1), "the fallback, once");
}

/// `n = 2` cannot be said to the Anthropic provider: it is passed over with
/// the reason (never sent the request without `n`). With an OpenAI provider
/// after it, that one serves; alone, the job fails saying why.
async fn a_dialect_that_cannot_express_the_request_is_passed_over(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_route(
            doc,
            "chat",
            "chain",
            toml::Value::Array(vec!["sim-fallback".into(), "sim-primary".into()]),
        );
        set_route(doc, "extract", "chain", toml::Value::Array(vec!["sim-fallback".into()]));
    })
    .await;
    let two = |route: &str| json!({"model": route, "n": 2, "messages": [{"role": "user", "content": "two"}]});
    let response = gw.chat_completion("n-two", &two("chat")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-primary");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"].as_array().unwrap().len(), 2, "{answer}");

    let refused = gw.chat_completion("n-two-alone", &two("extract")).await;
    assert_eq!(refused.status(), 502);
    assert!(refused.headers().contains_key("x-intentgate-job-id"));
    let problem: Value = refused.json().await.unwrap();
    let reasons = problem["error_detail"]["refused"].to_string();
    assert!(reasons.contains("sim-fallback") && reasons.contains("`n` > 1"), "{problem}");
    let message = problem["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("passed over sim-fallback") && message.contains("`n` > 1"),
        "the SDK prints the cause: {message}"
    );
    assert_eq!(gw.sim().calls().by_path.get("/v1/messages"), None, "Anthropic was never called");
    assert_eq!(gw.sim().calls().total, 1);
}
