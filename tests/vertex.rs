//! Google Vertex AI (`dialect = "vertex"`) end to end, over real HTTP
//! against the simulator on loopback, on both stores: Claude at
//! `…/publishers/anthropic/models/{model}:rawPredict` (streamed:
//! `:streamRawPredict`) with Vertex's Messages body, Gemini at
//! `…/publishers/google/models/{model}:generateContent`, both with an
//! access token the gateway mints from a service-account key at the
//! simulator's token endpoint. Plain, streamed, a forced tool call and the
//! round trip; a Messages-door turn with thinking passed through unchanged;
//! a token the simulator expires is replaced mid-run with one upstream call
//! per attempt; a wrong key is `not_sent` and fails over. Every call counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    ALICE, TestGateway, TestStore, calls_at, chunks_of, job_of, one_call_per_attempt, settled_job,
    vertex_key_file,
};
use intentgate_providers::sim::{TEST_SERVICE_ACCOUNT, WRONG_KEY_SERVICE_ACCOUNT};
use serde_json::{Value, json};

store_matrix!(
    claude_on_vertex_answers_plain_streamed_and_with_tools,
    a_thinking_turn_passes_through_to_claude_on_vertex_unchanged,
    gemini_on_vertex_answers_plain_and_streamed,
    a_token_expired_mid_run_is_replaced_with_one_call_per_attempt,
    a_wrong_key_is_not_sent_and_fails_over,
);

const CLAUDE: &str = "claude-sonnet-4-5@20250929";
const GEMINI: &str = "gemini-2.5-pro";
const BASE: &str = "/v1/projects/proj-1/locations/us-east5/publishers";

/// A gateway with Vertex providers `vertex-claude`, `vertex-gemini` and
/// `vertex-wrong` (Claude, a key the simulator does not know), each alone
/// on a route of its name; `vertex-wrong`'s route falls back to `sim-primary`.
async fn gateway(store: &TestStore) -> TestGateway {
    TestGateway::start_tweaked(store, |doc| {
        let sim_base =
            doc["providers"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("sim-fallback"));
        let sim_base = sim_base.unwrap()["base_url"].as_str().unwrap().to_owned();
        let genuine = vertex_key_file(TEST_SERVICE_ACCOUNT, &sim_base);
        let wrong = vertex_key_file(WRONG_KEY_SERVICE_ACCOUNT, &sim_base);
        for (name, model, key) in [
            ("vertex-claude", CLAUDE, &genuine),
            ("vertex-gemini", GEMINI, &genuine),
            ("vertex-wrong", CLAUDE, &wrong),
        ] {
            let mut provider = toml::Table::new();
            for (field, value) in [
                ("name", name),
                ("dialect", "vertex"),
                ("model", model),
                ("project", "proj-1"),
                ("location", "us-east5"),
                ("base_url", &sim_base),
                ("credentials_file", key),
            ] {
                provider.insert(field.into(), value.into());
            }
            doc["providers"].as_array_mut().unwrap().push(provider.into());
            let chain: Vec<toml::Value> = match name {
                "vertex-wrong" => vec![name.into(), "sim-primary".into()],
                _ => vec![name.into()],
            };
            let mut route = toml::Table::new();
            route.insert("name".into(), name.into());
            route.insert("chain".into(), toml::Value::Array(chain));
            route.insert("require_contract_for_primary".into(), false.into());
            route.insert("require_contract_for_fallback".into(), false.into());
            doc["routes"].as_array_mut().unwrap().push(route.into());
        }
    })
    .await
}

/// The text of a streamed answer on `route`.
async fn streamed_text(gw: &TestGateway, key: &str, route: &str, text: &str) -> String {
    let body = json!({"model": route, "stream": true, "messages": [{"role": "user", "content": text}]});
    let streamed = gw.chat_completion(key, &body).await;
    assert_eq!(streamed.status(), 200);
    chunks_of(&streamed.text().await.unwrap())
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

const WEATHER: &str = r#"{"type": "function", "function": {"name": "weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}"#;

async fn claude_on_vertex_answers_plain_streamed_and_with_tools(store: TestStore) {
    let gw = gateway(&store).await;
    let plain = gw
        .chat_completion(
            "vx-plain",
            &json!({"model": "vertex-claude", "messages": [{"role": "user", "content": "hello vertex"}]}),
        )
        .await;
    assert_eq!(plain.status(), 200);
    let job = job_of(&plain);
    let answer: Value = plain.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: hello vertex");
    let seen = gw.sim().last_request(&job).unwrap();
    let sent = seen.body.unwrap();
    assert_eq!((sent.get("model"), &sent["anthropic_version"]), (None, &json!("vertex-2023-10-16")));
    assert!(seen.headers["authorization"].starts_with("Bearer ya29.sim-"));
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);

    assert_eq!(streamed_text(&gw, "vx-stream", "vertex-claude", "hello stream").await, "echo: hello stream");

    let weather: Value = serde_json::from_str(WEATHER).unwrap();
    let forced = json!({"model": "vertex-claude", "messages": [{"role": "user", "content": "Oslo"}], "tools": [weather],
        "tool_choice": {"type": "function", "function": {"name": "weather"}}});
    let called: Value = gw.chat_completion("vx-tool", &forced).await.json().await.unwrap();
    let call = &called["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(
        (called["choices"][0]["finish_reason"].as_str(), call["function"]["name"].as_str()),
        (Some("tool_calls"), Some("weather")),
        "{called}"
    );
    let round_trip = json!({"model": "vertex-claude", "tools": [weather], "messages": [
        {"role": "user", "content": "Oslo"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "rain in Oslo"}]});
    let answered: Value = gw.chat_completion("vx-round-trip", &round_trip).await.json().await.unwrap();
    assert_eq!(answered["choices"][0]["message"]["content"], "echo: rain in Oslo", "{answered}");

    assert_eq!(calls_at(&gw, &format!("{BASE}/anthropic/models/{CLAUDE}:rawPredict")), 3);
    assert_eq!(calls_at(&gw, &format!("{BASE}/anthropic/models/{CLAUDE}:streamRawPredict")), 1);
    assert_eq!(calls_at(&gw, "/token"), 1, "one token for the whole run");
}

async fn a_thinking_turn_passes_through_to_claude_on_vertex_unchanged(store: TestStore) {
    let gw = gateway(&store).await;
    let sent = common::claude_code_turn("vertex-claude");
    let response = common::send_as_claude_code(&gw, "vx-think", &sent).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["type"], "message", "answered in the Messages API's own words");

    let seen = gw.sim().last_request(&job).unwrap();
    let mut expected = sent.clone();
    let fields = expected.as_object_mut().unwrap();
    fields.remove("model");
    fields.insert("anthropic_version".into(), "vertex-2023-10-16".into());
    assert_eq!(
        seen.body.unwrap(),
        expected,
        "thinking, cache breakpoints and all, as sent but for Vertex's two fields"
    );
    assert_eq!(
        seen.headers["anthropic-beta"],
        common::CLAUDE_CODE_BETAS,
        "the betas are carried as a header"
    );
    assert!(!seen.headers.contains_key("anthropic-version"), "the version is the body's on Vertex");
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
}

async fn gemini_on_vertex_answers_plain_and_streamed(store: TestStore) {
    let gw = gateway(&store).await;
    let plain = gw
        .chat_completion(
            "vg-plain",
            &json!({"model": "vertex-gemini", "messages": [{"role": "user", "content": "hello gemini"}]}),
        )
        .await;
    let job = job_of(&plain);
    let answer: Value = plain.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: hello gemini");
    let sent = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(
        sent["contents"],
        json!([{"role": "user", "parts": [{"text": "hello gemini"}]}]),
        "Gemini's body"
    );

    assert_eq!(streamed_text(&gw, "vg-stream", "vertex-gemini", "hello stream").await, "echo: hello stream");
    assert_eq!(calls_at(&gw, &format!("{BASE}/google/models/{GEMINI}:generateContent")), 1);
    assert_eq!(calls_at(&gw, &format!("{BASE}/google/models/{GEMINI}:streamGenerateContent")), 1);
}

async fn a_token_expired_mid_run_is_replaced_with_one_call_per_attempt(store: TestStore) {
    let gw = gateway(&store).await;
    gw.sim().expire_next_token();
    for i in 0..3 {
        let body =
            json!({"model": "vertex-claude", "messages": [{"role": "user", "content": format!("turn {i}")}]});
        let response = gw.chat_completion(&format!("vx-refresh-{i}"), &body).await;
        assert_eq!(response.status(), 200, "turn {i}");
        let job = job_of(&response);
        let attempts = one_call_per_attempt(&gw, &job).await;
        assert_eq!((attempts.len(), attempts[0]["outcome"].as_str()), (1, Some("ok")), "turn {i}");
    }
    assert_eq!(calls_at(&gw, "/token"), 2, "the first token expired after its use: one refresh, then kept");
}

async fn a_wrong_key_is_not_sent_and_fails_over(store: TestStore) {
    let gw = gateway(&store).await;
    let body = json!({"model": "vertex-wrong", "messages": [{"role": "user", "content": "hello"}]});
    let response = gw.chat_completion("vx-wrong", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-intentgate-provider"], "sim-primary");
    let job = job_of(&response);
    let view = settled_job(&gw, ALICE, &job).await;
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(
        (attempts[0]["provider"].as_str(), attempts[0]["outcome"].as_str()),
        (Some("vertex-wrong"), Some("not_sent")),
        "{view}"
    );
    assert_eq!(attempts.len(), 2, "failed over at once: {view}");
    assert_eq!(calls_at(&gw, "/token"), 1, "the assertion was refused");
    assert_eq!(
        calls_at(&gw, &format!("{BASE}/anthropic/models/{CLAUDE}:rawPredict")),
        0,
        "Vertex never called"
    );
    assert_eq!(gw.sim().calls().by_key.get(&job).copied(), Some(1), "one call: the fallback's");
}
