//! Azure OpenAI's addressing of the OpenAI dialect (`dialect = "azure"`),
//! over real HTTP against the simulator on loopback, on both stores: the
//! request reaches the deployment's path with `api-version` and the key in
//! `api-key` (no `Authorization`); plain, streamed with usage, a forced
//! tool call, embeddings; a 429 retried and a 5xx failed over like any
//! other dialect's, mid-conversation onto an Anthropic provider. Every job
//! is counted at the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestGateway, TestStore};
use serde_json::{Value, json};

store_matrix!(
    a_request_reaches_the_deployment_as_azure_addresses_it,
    streams_tools_and_embeddings_speak_openai_at_the_deployment,
    a_rate_limit_is_retried_and_an_outage_fails_over_like_any_dialect,
);

const KEY: &str = "azure-key-0123456789";
const VERSION: &str = "2024-10-21";

/// A gateway with provider `azure` (deployment `gpt-4o-mini-prod`, model
/// `model`) first on routes `azure-chat` (then `sim-fallback`) and
/// `azure-embeddings`.
async fn gateway(store: &TestStore, model: &str) -> TestGateway {
    let env = format!("INTENTGATE_TEST_AZURE_KEY_{}", uuid::Uuid::now_v7().simple());
    // SAFETY: a fresh, unique name nothing else reads or writes concurrently.
    unsafe { std::env::set_var(&env, KEY) };
    let model = model.to_owned();
    TestGateway::start_tweaked(store, move |doc| {
        let mut provider = toml::Table::new();
        for (key, value) in [
            ("name", "azure"),
            ("dialect", "azure"),
            ("model", model.as_str()),
            ("deployment", "gpt-4o-mini-prod"),
            ("api_version", VERSION),
            ("api_key_env", env.as_str()),
        ] {
            provider.insert(key.into(), value.into());
        }
        let sim =
            doc["providers"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("sim-fallback"));
        provider.insert("base_url".into(), sim.unwrap()["base_url"].clone());
        doc["providers"].as_array_mut().unwrap().push(provider.into());
        for (name, chain) in
            [("azure-chat", vec!["azure", "sim-fallback"]), ("azure-embeddings", vec!["azure"])]
        {
            let mut route = toml::Table::new();
            route.insert("name".into(), name.into());
            route.insert("chain".into(), toml::Value::Array(chain.into_iter().map(Into::into).collect()));
            route.insert("require_contract_for_primary".into(), false.into());
            route.insert("require_contract_for_fallback".into(), false.into());
            route.insert("retry_statuses".into(), toml::Value::Array(vec![429.into()]));
            doc["routes"].as_array_mut().unwrap().push(route.into());
        }
    })
    .await
}

fn job_of(response: &reqwest::Response) -> String {
    response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned()
}

fn hello(stream: bool) -> Value {
    json!({"model": "azure-chat", "messages": [{"role": "user", "content": "hello azure"}], "stream": stream})
}

async fn a_request_reaches_the_deployment_as_azure_addresses_it(store: TestStore) {
    let gw = gateway(&store, "sim:ok").await;
    let response = gw.chat_completion("az-1", &hello(false)).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "echo: hello azure", "{body}");
    let seen = gw.sim().last_request(&job).unwrap();
    assert_eq!(seen.path, "/openai/deployments/gpt-4o-mini-prod/chat/completions");
    assert_eq!(seen.query.as_deref(), Some("api-version=2024-10-21"));
    assert_eq!(seen.headers.get("api-key").map(String::as_str), Some(KEY));
    assert!(!seen.headers.contains_key("authorization"), "no Authorization: {:?}", seen.headers.keys());
    assert_eq!(gw.sim().calls().total, 1);
}

async fn streams_tools_and_embeddings_speak_openai_at_the_deployment(store: TestStore) {
    let gw = gateway(&store, "sim:ok").await;
    let mut streamed = hello(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let text = gw.chat_completion("az-stream", &streamed).await.text().await.unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let said: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, "echo: hello azure");
    assert!(chunks.last().unwrap()["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));

    gw.sim().queue(Some("sim:ok"), "tool_call", 1).unwrap();
    let tool = json!({"model": "azure-chat", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "weather"}}});
    let called: Value = gw.chat_completion("az-tool", &tool).await.json().await.unwrap();
    assert_eq!(called["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "weather", "{called}");

    let embed = gw
        .post_door("/v1/embeddings", "az-embed", &json!({"model": "azure-embeddings", "input": "a fox"}))
        .await;
    assert_eq!(embed.status(), 200);
    let job = job_of(&embed);
    assert_eq!(gw.sim().last_request(&job).unwrap().path, "/openai/deployments/gpt-4o-mini-prod/embeddings");
    assert_eq!(gw.sim().calls().total, 3);
}

async fn a_rate_limit_is_retried_and_an_outage_fails_over_like_any_dialect(store: TestStore) {
    let gw = gateway(&store, "sim:ok").await;
    gw.sim().queue(Some("sim:ok"), "status=429;retry_after=0", 1).unwrap();
    let retried = gw.chat_completion("az-429", &hello(false)).await;
    assert_eq!(retried.status(), 200);
    assert_eq!(retried.headers()["x-intentgate-provider"], "azure", "the same deployment, again");
    assert_eq!(retried.headers()["x-intentgate-attempt"], "2");

    // An outage mid-conversation: the Anthropic provider is told all of it.
    gw.sim().queue(Some("sim:ok"), "status=503", 1).unwrap();
    let turn = json!({"model": "azure-chat", "messages": [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "echo: My name is Ada."},
        {"role": "user", "content": "And now?"}]});
    let failed_over = gw.chat_completion("az-503", &turn).await;
    assert_eq!(failed_over.status(), 200);
    assert_eq!(failed_over.headers()["x-intentgate-provider"], "sim-fallback");
    let body: Value = failed_over.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "echo: And now?");
    assert_eq!(gw.sim().calls().total, 4, "429 then 200; 503 then the fallback");
}
