//! The Gemini dialect (`dialect = "gemini"`) end to end, over real HTTP
//! against the simulator on loopback, on both stores: the request reaches
//! `/v1beta/models/{model}:generateContent` (streamed:
//! `:streamGenerateContent?alt=sse`) as Gemini takes it — `contents` of
//! `parts`, `systemInstruction`, `functionDeclarations`, the key in
//! `x-goog-api-key` and no `Authorization` — and its answer comes back in
//! OpenAI's shape: plain, streamed, a forced tool call, a tool round trip,
//! usage. A safety block is the content refusal (no failover); 429s and
//! 5xx are classified as for any dialect; a conversation fails over from
//! Gemini to OpenAI and back. Every job is counted at the simulator: one
//! upstream call per attempt.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    ALICE, TestGateway, TestStore, assert_problem, calls_at, chunks_of, job_of, one_call_per_attempt,
    set_provider, set_route, settled_job,
};
use serde_json::{Value, json};

store_matrix!(
    a_plain_request_reaches_gemini_as_gemini_takes_it,
    a_stream_arrives_as_openai_chunks,
    a_forced_tool_call_arrives_as_openai_tool_calls,
    a_tool_round_trip_sends_the_result_as_a_function_response,
    usage_is_reported_and_kept,
    a_reservation_reads_the_limit_gemini_is_sent,
    a_safety_block_is_content_refused_and_not_failed_over,
    rate_limits_and_outages_are_classified_like_any_dialect,
    a_silence_or_a_cut_stream_is_unknown_and_never_failed_over,
    a_conversation_fails_over_from_gemini_to_openai_and_back,
);

const KEY: &str = "gemini-key-0123456789";
/// The Gemini provider's model: no `sim:` prefix, so the simulator answers
/// `ok` unless a script is queued for exactly this model.
const MODEL: &str = "gemini-2.5-flash";
/// Where the simulator counts the Gemini provider's calls.
const GENERATE: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
const STREAM: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
/// Where it counts the OpenAI provider's (`sim-primary`).
const OPENAI: &str = "/v1/chat/completions";

/// A gateway with provider `gemini` on routes `gemini-chat` (then the
/// OpenAI provider `sim-primary`) and `openai-chat` (`sim-primary`, then
/// `gemini`); `tweak` changes the document further.
async fn gateway(store: &TestStore, tweak: impl FnOnce(&mut toml::Table)) -> TestGateway {
    let env = format!("INTENTGATE_TEST_GEMINI_KEY_{}", uuid::Uuid::now_v7().simple());
    // SAFETY: a fresh, unique name nothing else reads or writes concurrently.
    unsafe { std::env::set_var(&env, KEY) };
    TestGateway::start_tweaked(store, move |doc| {
        let mut provider = toml::Table::new();
        for (key, value) in
            [("name", "gemini"), ("dialect", "gemini"), ("model", MODEL), ("api_key_env", env.as_str())]
        {
            provider.insert(key.into(), value.into());
        }
        let sim =
            doc["providers"].as_array().unwrap().iter().find(|p| p["name"].as_str() == Some("sim-fallback"));
        provider.insert("base_url".into(), sim.unwrap()["base_url"].clone());
        doc["providers"].as_array_mut().unwrap().push(provider.into());
        for (name, chain) in
            [("gemini-chat", ["gemini", "sim-primary"]), ("openai-chat", ["sim-primary", "gemini"])]
        {
            let mut route = toml::Table::new();
            route.insert("name".into(), name.into());
            route.insert("chain".into(), toml::Value::Array(chain.into_iter().map(Into::into).collect()));
            route.insert("require_contract_for_primary".into(), false.into());
            route.insert("require_contract_for_fallback".into(), false.into());
            route.insert("retry_statuses".into(), toml::Value::Array(vec![429.into()]));
            route.insert("retry_connect_errors".into(), false.into());
            doc["routes"].as_array_mut().unwrap().push(route.into());
        }
        tweak(doc);
    })
    .await
}

fn provider_of(response: &reqwest::Response) -> String {
    response.headers()["x-intentgate-provider"].to_str().unwrap().to_owned()
}

fn ask(route: &str, messages: Value) -> Value {
    json!({"model": route, "messages": messages})
}

const WEATHER: &str = r#"{"type": "function", "function": {"name": "weather", "description": "the weather in a city",
    "parameters": {"type": "object", "additionalProperties": false,
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}"#;

async fn a_plain_request_reaches_gemini_as_gemini_takes_it(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    let body = ask(
        "gemini-chat",
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello gemini"}
        ]),
    );
    let response = gw.chat_completion("gm-plain", &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(provider_of(&response), "gemini");
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: hello gemini", "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["model"], MODEL, "modelVersion names the model that answered");

    let seen = gw.sim().last_request(&job).unwrap();
    assert_eq!(seen.path, GENERATE);
    assert_eq!(seen.query, None, "the key is never in the URL");
    assert_eq!(seen.headers.get("x-goog-api-key").map(String::as_str), Some(KEY));
    assert!(!seen.headers.contains_key("authorization"), "no Authorization: {:?}", seen.headers.keys());
    assert_eq!(
        seen.body.unwrap(),
        json!({"systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [{"role": "user", "parts": [{"text": "hello gemini"}]}]})
    );
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    assert_eq!(gw.sim().calls().total, 1);
}

async fn a_stream_arrives_as_openai_chunks(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    let mut body = ask("gemini-chat", json!([{"role": "user", "content": "stream to me"}]));
    body["stream"] = true.into();
    body["stream_options"] = json!({"include_usage": true});
    let response = gw.chat_completion("gm-stream", &body).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let text = response.text().await.unwrap();
    let chunks = chunks_of(&text);
    let said: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, "echo: stream to me");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["model"] == MODEL), "{text}");
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "stop"), "{text}");
    assert_eq!(chunks.last().unwrap()["choices"], json!([]), "the usage chunk last: {text}");
    assert!(chunks.last().unwrap()["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    assert!(text.ends_with("data: [DONE]\n\n"));

    let seen = gw.sim().last_request(&job).unwrap();
    assert_eq!(seen.path, STREAM);
    assert_eq!(seen.query.as_deref(), Some("alt=sse"));
    assert_eq!(
        seen.body.unwrap()["contents"],
        json!([{"role": "user", "parts": [{"text": "stream to me"}]}])
    );
    let view = settled_job(&gw, ALICE, &job).await;
    assert_eq!(view["result"]["text"], "echo: stream to me", "{view}");
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    assert_eq!((calls_at(&gw, STREAM), gw.sim().calls().total), (1, 1));
}

async fn a_forced_tool_call_arrives_as_openai_tool_calls(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    gw.sim().queue(Some(MODEL), "tool_call", 2).unwrap();
    let weather: Value = serde_json::from_str(WEATHER).unwrap();
    let mut body = ask("gemini-chat", json!([{"role": "user", "content": "Oslo"}]));
    body["tools"] = json!([weather]);
    body["tool_choice"] = json!({"type": "function", "function": {"name": "weather"}});
    let response = gw.chat_completion("gm-tool", &body).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    assert!(choice["message"]["content"].is_null());
    let call = &choice["message"]["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "weather");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Oslo"}));

    let sent = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(
        sent["tools"],
        json!([{"functionDeclarations": [{"name": "weather", "description": "the weather in a city",
            "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]}])
    );
    assert_eq!(
        sent["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}})
    );

    // Streamed, the call arrives whole, as OpenAI's tool-call delta.
    body["stream"] = true.into();
    let streamed = gw.chat_completion("gm-tool-stream", &body).await;
    let stream_job = job_of(&streamed);
    let chunks = chunks_of(&streamed.text().await.unwrap());
    let delta = chunks.iter().find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0).cloned()).unwrap();
    assert_eq!((delta["index"].as_u64(), delta["function"]["name"].as_str()), (Some(0), Some("weather")));
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
    for job in [job, stream_job] {
        assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    }
    assert_eq!((calls_at(&gw, GENERATE), calls_at(&gw, STREAM), gw.sim().calls().total), (1, 1, 2));
}

async fn a_tool_round_trip_sends_the_result_as_a_function_response(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    let weather: Value = serde_json::from_str(WEATHER).unwrap();
    let mut body = ask(
        "gemini-chat",
        json!([
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_abc", "content": "rain in Oslo"}
        ]),
    );
    body["tools"] = json!([weather]);
    let response = gw.chat_completion("gm-round-trip", &body).await;
    assert_eq!(response.status(), 200);
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: rain in Oslo", "{answer}");
    let sent = gw.sim().last_request(&job).unwrap().body.unwrap();
    assert_eq!(
        sent["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"output": "rain in Oslo"}}}]}
        ])
    );
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    assert_eq!(gw.sim().calls().total, 1);
}

async fn usage_is_reported_and_kept(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    let body = ask("gemini-chat", json!([{"role": "user", "content": "count these four words"}]));
    let response = gw.chat_completion("gm-usage", &body).await;
    let job = job_of(&response);
    let answer: Value = response.json().await.unwrap();
    // The simulator counts words: 4 in, 5 out ("echo: count these four words").
    let usage = &answer["usage"];
    assert_eq!(
        (usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()),
        (Some(4), Some(5)),
        "{answer}"
    );
    assert_eq!(usage["total_tokens"], 9, "usageMetadata.totalTokenCount");
    let raw: Value = {
        let seen = gw.gateway.store.attempts(job.parse().unwrap()).await.unwrap();
        let stored = gw.gateway.store.attempt_response(seen[0].id).await.unwrap();
        serde_json::from_str(stored.as_deref().unwrap_or_default()).unwrap_or_default()
    };
    assert_eq!(
        raw["usageMetadata"]["candidatesTokenCount"], 5,
        "the attempt keeps Gemini's own answer: {raw}"
    );
    let view = settled_job(&gw, ALICE, &job).await;
    assert_eq!(view["result"]["usage"], json!({"prompt_tokens": 4, "completion_tokens": 5}), "{view}");
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    assert_eq!(gw.sim().calls().total, 1);
}

/// A priced Gemini provider reserves the completion limit it is sent in
/// `generationConfig.maxOutputTokens`: the client's, or `[billing]
/// default_max_tokens` filled in when the client set none.
async fn a_reservation_reads_the_limit_gemini_is_sent(store: TestStore) {
    let gw = gateway(&store, |doc| {
        let mut price = toml::Table::new();
        price.insert("input_per_mtok".into(), 1.0.into());
        price.insert("output_per_mtok".into(), 2.0.into());
        set_provider(doc, "gemini", "price", price);
        let mut billing = toml::Table::new();
        billing.insert("default_max_tokens".into(), 64.into());
        doc.insert("billing".into(), billing.into());
    })
    .await;
    for (key, max_tokens, reserved_at_least, sent) in
        [("gm-limit", Some(5000), 5000, 5000), ("gm-default", None, 64, 64)]
    {
        let mut body = ask("gemini-chat", json!([{"role": "user", "content": "hi"}]));
        if let Some(max_tokens) = max_tokens {
            body["max_tokens"] = max_tokens.into();
        }
        let response = gw.chat_completion(key, &body).await;
        assert_eq!(response.status(), 200);
        let job = job_of(&response);
        let seen = gw.sim().last_request(&job).unwrap().body.unwrap();
        assert_eq!(seen["generationConfig"]["maxOutputTokens"], sent, "{seen}");
        let attempts = gw.gateway.store.attempts(job.parse().unwrap()).await.unwrap();
        let reserved = attempts[0].reserved.tokens;
        assert!(
            reserved >= reserved_at_least && reserved < reserved_at_least + 1000,
            "{key}: reserved {reserved}"
        );
        assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    }
}

async fn a_safety_block_is_content_refused_and_not_failed_over(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    gw.sim().queue(Some(MODEL), "content-policy", 2).unwrap();
    gw.sim().queue(Some(MODEL), "safety-stop", 1).unwrap();
    for (key, stream) in [("gm-blocked", false), ("gm-blocked-stream", true), ("gm-stopped", false)] {
        let mut body = ask("gemini-chat", json!([{"role": "user", "content": "something unsafe"}]));
        body["stream"] = stream.into();
        let response = gw.chat_completion(key, &body).await;
        let job = job_of(&response);
        assert_problem(response, 400, "content-refused").await;
        let view = settled_job(&gw, ALICE, &job).await;
        assert_eq!(view["status"], "failed", "{view}");
        assert_eq!(view["error"]["code"], "content-refused", "{view}");
        assert!(view["error"]["reason"].as_str().unwrap().contains("`gemini` refused the request"), "{view}");
        let attempts = one_call_per_attempt(&gw, &job).await;
        assert_eq!(attempts.len(), 1, "{key}: no failover");
        assert_eq!(attempts[0]["outcome"], "rejected");
    }
    assert_eq!(calls_at(&gw, OPENAI), 0, "nothing at the fallback");
    assert_eq!(gw.sim().calls().total, 3);

    // A route that opts into failing over content refusals does.
    let opted =
        gateway(&store, |doc| set_route(doc, "gemini-chat", "fail_over_content_refusals", true)).await;
    opted.sim().queue(Some(MODEL), "content-policy", 1).unwrap();
    let response = opted
        .chat_completion("gm-shops-on", &ask("gemini-chat", json!([{"role": "user", "content": "x"}])))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(provider_of(&response), "sim-primary");
    assert_eq!(one_call_per_attempt(&opted, &job_of(&response)).await.len(), 2);
    assert_eq!((calls_at(&opted, GENERATE), calls_at(&opted, OPENAI)), (1, 1));
}

async fn rate_limits_and_outages_are_classified_like_any_dialect(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    let hello = ask("gemini-chat", json!([{"role": "user", "content": "hello"}]));
    // A 429 whose wait Google gives in the body (RetryInfo.retryDelay "1s")
    // retries the same provider, after that wait.
    gw.sim().queue(Some(MODEL), "status=429;retry_after=1", 1).unwrap();
    let retried = gw.chat_completion("gm-429", &hello).await;
    assert_eq!(retried.status(), 200);
    assert_eq!(
        (provider_of(&retried), retried.headers()["x-intentgate-attempt"].to_str().unwrap()),
        ("gemini".into(), "2")
    );
    let job = job_of(&retried);
    let attempts = one_call_per_attempt(&gw, &job).await;
    assert_eq!(
        (attempts[0]["provider"].as_str(), attempts[0]["outcome"].as_str()),
        (Some("gemini"), Some("rejected"))
    );
    let stored = gw.gateway.store.attempts(job.parse().unwrap()).await.unwrap();
    let waited = stored[1].started_at_ms - stored[0].finished_at_ms.unwrap();
    assert!(waited >= 1000, "retryDelay 1s honoured, waited {waited} ms");

    // A 500 or a 503 (not a retry class on this route) fails over at once.
    for (key, status) in [("gm-500", 500), ("gm-503", 503)] {
        gw.sim().queue(Some(MODEL), &format!("status={status}"), 1).unwrap();
        let failed_over = gw.chat_completion(key, &hello).await;
        assert_eq!(failed_over.status(), 200);
        assert_eq!(provider_of(&failed_over), "sim-primary", "{status}");
        let attempts = one_call_per_attempt(&gw, &job_of(&failed_over)).await;
        assert_eq!(attempts[0]["outcome"], "rejected");
        assert_eq!(attempts.len(), 2);
    }
    assert_eq!(
        (calls_at(&gw, GENERATE), calls_at(&gw, OPENAI)),
        (4, 2),
        "429 then 200; 500, 503 then the fallback"
    );

    // With the shipped retry classes a 503 is retried on Gemini first.
    let shipped = gateway(&store, |doc| {
        for route in doc["routes"].as_array_mut().unwrap() {
            let route = route.as_table_mut().unwrap();
            if route["name"].as_str() == Some("gemini-chat") {
                route.remove("retry_statuses");
                route.insert("retry_backoff".into(), "10ms".into());
            }
        }
    })
    .await;
    shipped.sim().queue(Some(MODEL), "status=503", 1).unwrap();
    let retried = shipped.chat_completion("gm-503-retried", &hello).await;
    assert_eq!(
        (provider_of(&retried), retried.headers()["x-intentgate-attempt"].to_str().unwrap()),
        ("gemini".into(), "2")
    );
    assert_eq!(one_call_per_attempt(&shipped, &job_of(&retried)).await.len(), 2);
    assert_eq!(calls_at(&shipped, GENERATE), 2);
}

/// A Gemini call that hangs past the attempt timeout leaves the job
/// `unknown` (the fallback is not called: Gemini may still be working); a
/// stream cut after chunks reached the client ends the job
/// `outcome-unknown` with an in-band error — as for any dialect.
async fn a_silence_or_a_cut_stream_is_unknown_and_never_failed_over(store: TestStore) {
    let gw = gateway(&store, |doc| set_route(doc, "gemini-chat", "attempt_timeout", "300ms")).await;
    gw.sim().queue(Some(MODEL), "hang", 1).unwrap();
    let native =
        json!({"route": "gemini-chat", "input": {"messages": [{"role": "user", "content": "hang on"}]}});
    let created: Value = gw.create(ALICE, "gm-hang", &native).await.json().await.unwrap();
    let job = created["id"].as_str().unwrap().to_owned();
    let view = settled_job(&gw, ALICE, &job).await;
    assert_eq!(view["status"], "unknown", "{view}");
    assert_eq!(view["attempts"][0]["state"], "unknown");
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);

    gw.sim().queue(Some(MODEL), "stream-cut", 1).unwrap();
    let mut body = ask("gemini-chat", json!([{"role": "user", "content": "a long answer that will be cut"}]));
    body["stream"] = true.into();
    let response = gw.chat_completion("gm-cut", &body).await;
    assert_eq!(response.status(), 200, "the stream had begun");
    let job = job_of(&response);
    let text = response.text().await.unwrap();
    assert!(!text.ends_with("data: [DONE]\n\n"), "never a clean-looking end: {text}");
    let events = chunks_of(&text);
    assert!(
        events.iter().any(|c| c["choices"][0]["delta"]["content"].is_string()),
        "content came first: {text}"
    );
    assert_eq!(events.last().unwrap()["error"]["code"], "outcome-unknown", "{text}");
    // The job is declared `unknown`, then failed: the client may read its
    // error event between the two writes.
    let mut view = settled_job(&gw, ALICE, &job).await;
    for _ in 0..100 {
        if view["status"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        view = settled_job(&gw, ALICE, &job).await;
    }
    assert_eq!(view["status"], "failed", "{view}");
    assert_eq!(view["error"]["code"], "outcome-unknown", "{view}");
    assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 1);
    assert_eq!((calls_at(&gw, GENERATE), calls_at(&gw, STREAM), calls_at(&gw, OPENAI)), (1, 1, 0));
}

/// A tool conversation that moves between dialects: OpenAI asks for the
/// tool (Gemini is down), Gemini is told the call and its result (OpenAI is
/// down) and answers, and OpenAI is told all of it (Gemini is down again).
async fn a_conversation_fails_over_from_gemini_to_openai_and_back(store: TestStore) {
    let gw = gateway(&store, |_| {}).await;
    let weather: Value = serde_json::from_str(WEATHER).unwrap();
    // The simulator fills a call's strings with the last user message.
    let mut messages = vec![json!({"role": "user", "content": "Oslo"})];
    let turn = |route: &str, messages: &[Value]| {
        let mut body = ask(route, Value::Array(messages.to_vec()));
        body["tools"] = json!([weather]);
        body
    };

    gw.sim().queue(Some(MODEL), "status=503", 1).unwrap();
    gw.sim().queue(Some("sim:ok"), "tool_call", 1).unwrap();
    let first = gw.chat_completion("gm-conv-1", &turn("gemini-chat", &messages)).await;
    assert_eq!(provider_of(&first), "sim-primary", "Gemini is down: OpenAI answers");
    let first_job = job_of(&first);
    let first: Value = first.json().await.unwrap();
    let asked = first["choices"][0]["message"].clone();
    let call_id = asked["tool_calls"][0]["id"].as_str().unwrap().to_owned();
    messages.push(asked);
    messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": "rain in Oslo"}));

    gw.sim().queue(Some("sim:ok"), "status=503", 1).unwrap();
    let second = gw.chat_completion("gm-conv-2", &turn("openai-chat", &messages)).await;
    assert_eq!(provider_of(&second), "gemini", "OpenAI is down: Gemini answers");
    let second_job = job_of(&second);
    let second: Value = second.json().await.unwrap();
    assert_eq!(second["choices"][0]["message"]["content"], "echo: rain in Oslo", "{second}");
    let sent = gw.sim().last_request(&second_job).unwrap().body.unwrap();
    assert_eq!(
        sent["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Oslo"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"output": "rain in Oslo"}}}]}
        ]),
        "OpenAI's call, named from its id"
    );
    messages.push(second["choices"][0]["message"].clone());
    messages.push(json!({"role": "user", "content": "And tomorrow?"}));

    gw.sim().queue(Some(MODEL), "status=503", 1).unwrap();
    let third = gw.chat_completion("gm-conv-3", &turn("gemini-chat", &messages)).await;
    assert_eq!(provider_of(&third), "sim-primary", "and back to OpenAI");
    let third_job = job_of(&third);
    let third: Value = third.json().await.unwrap();
    assert_eq!(third["choices"][0]["message"]["content"], "echo: And tomorrow?");
    let sent = gw.sim().last_request(&third_job).unwrap().body.unwrap();
    let roles: Vec<&str> =
        sent["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "user"], "the whole conversation: {sent}");
    assert_eq!(sent["messages"][3]["content"], "echo: rain in Oslo", "Gemini's answer, told to OpenAI");

    for job in [first_job, second_job, third_job] {
        assert_eq!(one_call_per_attempt(&gw, &job).await.len(), 2);
    }
    assert_eq!((calls_at(&gw, GENERATE), calls_at(&gw, OPENAI), gw.sim().calls().total), (3, 3, 6));
}
