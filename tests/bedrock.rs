//! The Bedrock dialect (`dialect = "bedrock"`) end to end, over real HTTP
//! against the simulator on loopback, on both stores: Claude through
//! `InvokeModel`, each request signed with SigV4 from the AWS keys the
//! provider's environment variables hold (the simulator recomputes the
//! signature), plain, streamed (the binary event stream), a forced tool
//! call and its round trip, and a Claude Code turn with thinking blocks
//! passed through unchanged. A wrong signature (Bedrock's 403) and
//! throttling (429) are proven failures: the job fails over, one upstream
//! call per attempt, counted at the simulator. A model that is not Claude
//! goes through `Converse` (`converse`, `converse-stream`): plain,
//! streamed and a tool round trip translated both ways, and a Messages
//! request with thinking passes it over with the reason, unsent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, TestGateway, TestStore, settled_job};
use intentgate_providers::sim::{BEDROCK_ACCESS_KEY_ID, BEDROCK_SECRET_ACCESS_KEY};
use serde_json::{Value, json};

store_matrix!(
    plain_streamed_and_a_tool_round_trip_reach_claude_on_bedrock,
    a_thinking_turn_passes_through_bedrock_unchanged,
    a_wrong_signature_is_rejected_and_fails_over_with_one_call_each,
    throttling_fails_over_with_one_call_each,
    plain_streamed_and_a_tool_round_trip_reach_a_model_through_converse,
    a_thinking_turn_passes_a_converse_model_over_unsent,
);

/// A Bedrock model that is not Claude: called through Converse.
const LLAMA: &str = "meta.llama3-3-70b-instruct-v1:0";
const LLAMA_PATH: &str = "/model/meta.llama3-3-70b-instruct-v1%3A0";

const MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";

/// Where the simulator counts an `operation` of [`MODEL`]: its id
/// percent-encoded in the path.
fn path(operation: &str) -> String {
    format!("/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/{operation}")
}

/// A gateway with provider `bedrock` (`model`, AWS keys with `secret`, in
/// variables only this test reads) on route `claude`: `bedrock`, then the
/// OpenAI provider `sim-primary`, failing over on a 429 at once.
async fn gateway(store: &TestStore, model: &str, secret: &str) -> TestGateway {
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let (access_env, secret_env) =
        (format!("INTENTGATE_TEST_AWS_KEY_{suffix}"), format!("INTENTGATE_TEST_AWS_SECRET_{suffix}"));
    // SAFETY: fresh, unique names nothing else reads or writes concurrently.
    unsafe {
        std::env::set_var(&access_env, BEDROCK_ACCESS_KEY_ID);
        std::env::set_var(&secret_env, secret);
    }
    let model = model.to_owned();
    TestGateway::start_tweaked(store, move |doc| {
        let sim =
            doc["providers"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("sim-fallback"));
        let base_url = sim.unwrap()["base_url"].clone();
        let mut provider = toml::Table::new();
        for (key, value) in [
            ("name", "bedrock"),
            ("dialect", "bedrock"),
            ("model", model.as_str()),
            ("region", "us-east-1"),
            ("access_key_env", access_env.as_str()),
            ("secret_key_env", secret_env.as_str()),
            ("session_token_env", "INTENTGATE_TEST_SURELY_UNSET"),
        ] {
            provider.insert(key.into(), value.into());
        }
        provider.insert("base_url".into(), base_url);
        doc["providers"].as_array_mut().unwrap().push(provider.into());
        let mut route = toml::Table::new();
        route.insert("name".into(), "on-bedrock".into());
        route.insert("chain".into(), toml::Value::Array(vec!["bedrock".into(), "sim-primary".into()]));
        route.insert("require_contract_for_primary".into(), false.into());
        route.insert("require_contract_for_fallback".into(), false.into());
        route.insert("retry_statuses".into(), toml::Value::Array(Vec::new()));
        doc["routes"].as_array_mut().unwrap().push(route.into());
    })
    .await
}

fn job_of(response: &reqwest::Response) -> String {
    response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned()
}

fn calls_at(gw: &TestGateway, path: &str) -> u64 {
    gw.sim().calls().by_path.get(path).copied().unwrap_or(0)
}

/// The job's attempts' classes, after asserting the simulator saw exactly
/// one upstream call per attempt.
async fn classes_with_one_call_each(gw: &TestGateway, job: &str) -> Vec<String> {
    let view = settled_job(gw, ALICE, job).await;
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(gw.sim().calls().by_key.get(job).copied(), Some(attempts.len() as u64), "{view}");
    attempts.iter().map(|a| a["outcome"].as_str().unwrap_or_default().to_owned()).collect()
}

const WEATHER: &str = r#"{"type": "function", "function": {"name": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}"#;

async fn plain_streamed_and_a_tool_round_trip_reach_claude_on_bedrock(store: TestStore) {
    let gw = gateway(&store, MODEL, BEDROCK_SECRET_ACCESS_KEY).await;
    let plain = json!({"model": "on-bedrock", "messages": [{"role": "user", "content": "hello bedrock"}]});
    let response = gw.chat_completion("br-plain", &plain).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "bedrock");
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: hello bedrock", "{answer}");
    let seen = gw.sim().last_request(&job).unwrap();
    assert!(seen.headers["authorization"].starts_with("AWS4-HMAC-SHA256 Credential=AKIDSIMULATOR/"));
    assert_eq!(seen.body.unwrap()["anthropic_version"], "bedrock-2023-05-31");

    let mut streamed = plain.clone();
    streamed["stream"] = true.into();
    let text = gw.chat_completion("br-stream", &streamed).await.text().await.unwrap();
    assert!(text.contains("echo") && text.trim_end().ends_with("data: [DONE]"), "{text}");

    let weather: Value = serde_json::from_str(WEATHER).unwrap();
    let forced = json!({"model": "on-bedrock", "messages": [{"role": "user", "content": "Utrecht"}], "tools": [weather],
        "tool_choice": {"type": "function", "function": {"name": "weather"}}});
    let answer: Value = gw.chat_completion("br-tool", &forced).await.json().await.unwrap();
    let call = answer["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "weather", "{answer}");
    let round_trip = json!({"model": "on-bedrock", "tools": [weather], "messages": [
        {"role": "user", "content": "Utrecht"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "rain"}
    ]});
    let answer: Value = gw.chat_completion("br-round", &round_trip).await.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: rain", "{answer}");
    assert_eq!((calls_at(&gw, &path("invoke")), calls_at(&gw, &path("invoke-with-response-stream"))), (3, 1));
    assert_eq!(gw.sim().calls().total, 4, "one upstream call per request");
}

async fn a_thinking_turn_passes_through_bedrock_unchanged(store: TestStore) {
    let gw = gateway(&store, MODEL, BEDROCK_SECRET_ACCESS_KEY).await;
    let turn = common::claude_code_turn("on-bedrock");
    let response = common::send_as_claude_code(&gw, "br-think", &turn).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "bedrock", "Bedrock speaks Messages");
    let job = job_of(&response);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message", "{message}");

    let seen = gw.sim().last_request(&job).unwrap();
    let mut expected = turn.clone();
    let fields = expected.as_object_mut().unwrap();
    fields.remove("model");
    fields.insert("anthropic_version".into(), "bedrock-2023-05-31".into());
    fields
        .insert("anthropic_beta".into(), json!(["claude-code-20250219", "interleaved-thinking-2025-05-14"]));
    assert_eq!(seen.body.unwrap(), expected, "thinking, cache_control and the rest as the client sent them");
    assert_eq!(gw.sim().calls().total, 1);
}

/// A request to route `claude` with a Bedrock provider that refuses it
/// (its calls counted at `path`): a proven failure, so `sim-primary`
/// answers, one upstream call each.
async fn fails_over_with_one_call_each(gw: &TestGateway, path: &str) {
    let body = json!({"model": "on-bedrock", "messages": [{"role": "user", "content": "hi"}]});
    let response = gw.chat_completion("br-refused", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-primary");
    let job = job_of(&response);
    assert_eq!(classes_with_one_call_each(gw, &job).await, ["rejected", "ok"]);
    assert_eq!((calls_at(gw, path), calls_at(gw, "/v1/chat/completions")), (1, 1));
}

async fn a_wrong_signature_is_rejected_and_fails_over_with_one_call_each(store: TestStore) {
    let gw = gateway(&store, MODEL, "not-the-simulator-secret").await;
    fails_over_with_one_call_each(&gw, &path("invoke")).await;
}

async fn throttling_fails_over_with_one_call_each(store: TestStore) {
    let gw = gateway(&store, "sim:status=429", BEDROCK_SECRET_ACCESS_KEY).await;
    fails_over_with_one_call_each(&gw, "/model/sim%3Astatus%3D429/invoke").await;
}

async fn plain_streamed_and_a_tool_round_trip_reach_a_model_through_converse(store: TestStore) {
    let gw = gateway(&store, LLAMA, BEDROCK_SECRET_ACCESS_KEY).await;
    let plain = json!({"model": "on-bedrock", "max_tokens": 200, "temperature": 0.5,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello llama"}]});
    let response = gw.chat_completion("cv-plain", &plain).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "bedrock");
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: hello llama", "{answer}");
    assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{answer}");
    let seen = gw.sim().last_request(&job).unwrap();
    assert!(seen.headers["authorization"].starts_with("AWS4-HMAC-SHA256 Credential=AKIDSIMULATOR/"));
    assert_eq!(
        seen.body.unwrap(),
        json!({"system": [{"text": "Be brief."}], "messages": [{"role": "user", "content": [{"text": "hello llama"}]}],
            "inferenceConfig": {"maxTokens": 200, "temperature": 0.5}})
    );

    let mut streamed = plain.clone();
    streamed["stream"] = true.into();
    streamed["stream_options"] = json!({"include_usage": true});
    let text = gw.chat_completion("cv-stream", &streamed).await.text().await.unwrap();
    assert!(
        text.contains("echo")
            && text.contains("\"total_tokens\"")
            && text.trim_end().ends_with("data: [DONE]"),
        "{text}"
    );

    let weather: Value = serde_json::from_str(WEATHER).unwrap();
    let forced = json!({"model": "on-bedrock", "messages": [{"role": "user", "content": "Utrecht"}], "tools": [weather],
        "tool_choice": {"type": "function", "function": {"name": "weather"}}});
    let answer: Value = gw.chat_completion("cv-tool", &forced).await.json().await.unwrap();
    let call = answer["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "weather", "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls", "{answer}");
    let round_trip = json!({"model": "on-bedrock", "tools": [weather], "messages": [
        {"role": "user", "content": "Utrecht"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "rain"}
    ]});
    let response = gw.chat_completion("cv-round", &round_trip).await;
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: rain", "{answer}");
    let sent = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(sent["messages"][1]["content"][0]["toolUse"]["name"], "weather", "{sent}");
    assert_eq!(
        sent["messages"][2]["content"][0]["toolResult"]["content"],
        json!([{"text": "rain"}]),
        "{sent}"
    );
    let calls = (
        calls_at(&gw, &format!("{LLAMA_PATH}/converse")),
        calls_at(&gw, &format!("{LLAMA_PATH}/converse-stream")),
    );
    assert_eq!(calls, (3, 1));
    assert_eq!(gw.sim().calls().total, 4, "one upstream call per request");
}

async fn a_thinking_turn_passes_a_converse_model_over_unsent(store: TestStore) {
    let gw = gateway(&store, LLAMA, BEDROCK_SECRET_ACCESS_KEY).await;
    let turn = common::claude_code_turn("on-bedrock");
    let response = common::send_as_claude_code(&gw, "cv-think", &turn).await;
    let job = job_of(&response);
    let view = settled_job(&gw, ALICE, &job).await;
    let error = view["error"].to_string();
    assert!(
        error.contains("bedrock: its dialect cannot express this request")
            && error.contains("bedrock-converse"),
        "{view}"
    );
    assert_eq!(calls_at(&gw, &format!("{LLAMA_PATH}/converse")), 0, "never sent with thinking dropped");
}
