//! Continuation after a cut (`[[routes]] continue_cut_streams`), over real
//! HTTP against the simulator on loopback, on both stores: a stream that
//! broke after part of it reached the client is continued by the chain's
//! next provider, and the client receives one coherent answer — prefilled
//! where the provider's dialect prefills (Anthropic's), re-run with the
//! text the client has skipped elsewhere (the Responses API), in Claude's
//! own events where the stream passed them through (by a provider that
//! speaks them), and never spliced onto a re-run that says something else,
//! nor onto part of a tool call. The crash test's faults after the first byte: S08 (a reset), S09
//! (a stall), S14 (a clean end half way). Without the option a cut stream
//! ends with an in-band error (`tests/openai.rs`). Upstream calls are
//! counted at the simulator by path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestGateway, TestStore, set_provider};
use serde_json::{Value, json};

store_matrix!(
    a_stream_reset_after_its_first_chunks_is_continued_by_a_prefill,
    a_stalled_stream_is_continued_by_a_re_run_whose_repeat_is_skipped,
    a_stream_that_ends_half_way_is_continued,
    a_continuation_silent_before_its_first_chunk_is_closed_and_continued_by_the_next,
    a_re_run_that_says_something_else_is_not_spliced_on,
    a_cut_tool_call_is_not_continued,
    through_the_messages_door_the_continued_stream_is_one_message,
    a_passed_through_stream_is_continued_by_a_provider_that_speaks_its_protocol,
    a_passed_through_stream_no_provider_can_continue_in_its_protocol_ends,
);

const PRIMARY: &str = "/v1/chat/completions";
const ANTHROPIC: &str = "/v1/messages";
const RESPONSES: &str = "/v1/responses";

/// A gateway with a route of its own (a name per test, so that tests
/// running at once in this process count their metrics apart) on `chain`,
/// with `continue_cut_streams`; `tweak` goes on from there.
async fn continuing(
    store: &TestStore,
    chain: &[&str],
    tweak: impl FnOnce(&mut toml::Table),
) -> (TestGateway, String) {
    let name = format!("continued-{}", uuid::Uuid::now_v7().simple());
    let (route_name, chain) = (name.clone(), chain.iter().map(|p| toml::Value::from(*p)).collect::<Vec<_>>());
    let gw = TestGateway::start_tweaked(store, move |doc| {
        let mut route = toml::Table::new();
        route.insert("name".into(), route_name.into());
        route.insert("chain".into(), chain.into());
        route.insert("continue_cut_streams".into(), true.into());
        route.insert("require_contract_for_primary".into(), false.into());
        route.insert("require_contract_for_fallback".into(), false.into());
        doc["routes"].as_array_mut().unwrap().push(route.into());
        tweak(doc);
    })
    .await;
    (gw, name)
}

/// What the request under `key` asks: long enough to be cut half way.
fn prompt(key: &str) -> String {
    format!("{key}, cut half way through a rather long answer")
}

/// A streamed chat completion on `route`: its status, its chunks.
async fn stream(gw: &TestGateway, route: &str, key: &str) -> (u16, Vec<Value>) {
    let request =
        json!({"model": route, "stream": true, "messages": [{"role": "user", "content": prompt(key)}]});
    let response = gw.chat_completion(key, &request).await;
    let status = response.status().as_u16();
    (status, common::chunks_of(&response.text().await.unwrap()))
}

/// The text the chunks' deltas make.
fn text_of(chunks: &[Value]) -> String {
    chunks.iter().filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str()).collect()
}

/// What every continued stream shows: one whole answer with one role, one
/// id and `[DONE]`-clean end, the same again on a replay, the job answered
/// by the second provider with the cut attempt `unknown` beside it, one
/// call each, counted as a possible duplicate and a continuation.
async fn assert_continued(
    gw: &TestGateway,
    route: &str,
    key: &str,
    (status, chunks): (u16, Vec<Value>),
) -> Value {
    assert_eq!(
        (status, text_of(&chunks)),
        (200, format!("echo: {}", prompt(key))),
        "one coherent answer: {chunks:?}"
    );
    let roles = chunks.iter().filter(|chunk| chunk["choices"][0]["delta"].get("role").is_some()).count();
    assert_eq!(roles, 1, "one role, as one answer has: {chunks:?}");
    let ids: std::collections::HashSet<&str> =
        chunks.iter().filter_map(|chunk| chunk["id"].as_str()).collect();
    assert_eq!(ids.len(), 1, "one id: {chunks:?}");
    assert!(chunks.iter().all(|chunk| chunk.get("error").is_none()), "no in-band error: {chunks:?}");
    let job = common::job_of_key(gw, key).await;
    let attempts = job["attempts"].as_array().unwrap();
    let states: Vec<&str> = attempts.iter().map(|attempt| attempt["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["unknown", "succeeded"], "{job}");
    let second = &attempts[1];
    assert_eq!((second["continues"].as_i64(), second["hedged"].as_bool()), (Some(1), Some(false)), "{job}");
    assert_eq!(
        (job["status"].as_str(), job["result"]["text"].as_str()),
        (Some("succeeded"), Some(&*format!("echo: {}", prompt(key))))
    );
    assert_eq!(job["executions"], json!({"answered": 1, "may_have_run": 1}), "{job}");
    let (replayed, again) = stream(gw, route, key).await;
    assert_eq!(
        (replayed, text_of(&again)),
        (200, format!("echo: {}", prompt(key))),
        "the replay is the same answer"
    );
    let continued = format!("intentgate_stream_continuations_total{{route=\"{route}\"}}");
    let twice = format!("intentgate_possible_duplicate_executions_total{{route=\"{route}\"}}");
    assert_eq!((common::metric(gw, &continued).await, common::metric(gw, &twice).await), (1.0, 1.0));
    job
}

/// S08: the primary resets the connection half way through its stream.
/// The Anthropic fallback is sent the request with the assistant's turn
/// begun with what the client has (without its trailing whitespace, which
/// Claude refuses) and says the rest.
async fn a_stream_reset_after_its_first_chunks_is_continued_by_a_prefill(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-primary", "sim-fallback"], |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "stream-cut", 1).unwrap();
    let key = "s08-reset";
    let streamed = stream(&gw, &route, key).await;
    let job = assert_continued(&gw, &route, key, streamed).await;
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, ANTHROPIC)), (1, 1), "one call each");
    let upstream = gw.sim().last_request(job["id"].as_str().unwrap()).unwrap().body.unwrap();
    let last = upstream["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "assistant", "a prefill: {upstream}");
    let prefill = last["content"].as_str().or(last["content"][0]["text"].as_str()).unwrap().to_owned();
    assert!(!prefill.is_empty() && format!("echo: {}", prompt(key)).starts_with(&prefill), "{prefill:?}");
    assert_eq!(prefill, prefill.trim_end(), "no trailing whitespace");
}

/// S09: the primary stalls half way (its `stream_idle_timeout` passes).
/// The Responses API does not prefill: the fallback runs the request again,
/// and what it says again of the text the client has is skipped.
async fn a_stalled_stream_is_continued_by_a_re_run_whose_repeat_is_skipped(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-primary", "sim-responses"], |doc| {
        set_provider(doc, "sim-primary", "stream_idle_timeout", "300ms");
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "stream-stall", 1).unwrap();
    let key = "s09-stall";
    let streamed = stream(&gw, &route, key).await;
    let job = assert_continued(&gw, &route, key, streamed).await;
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, RESPONSES)), (1, 1), "one call each");
    let upstream = gw.sim().last_request(job["id"].as_str().unwrap()).unwrap().body.unwrap();
    assert_eq!(
        upstream["input"].as_array().map(Vec::len),
        Some(1),
        "the request again, as it was: {upstream}"
    );
}

/// S14: the primary's stream ends cleanly half way, without its terminator.
async fn a_stream_that_ends_half_way_is_continued(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-primary", "sim-fallback"], |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "stream-truncated", 1).unwrap();
    let key = "s14-clean-end";
    let streamed = stream(&gw, &route, key).await;
    assert_continued(&gw, &route, key, streamed).await;
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, ANTHROPIC)), (1, 1));
}

/// A continuing provider silent past `attempt_timeout` is closed (its
/// chunks may not follow another's) and the next one continues: three
/// attempts, each continuing the one before, one answer.
async fn a_continuation_silent_before_its_first_chunk_is_closed_and_continued_by_the_next(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-primary", "sim-fallback", "sim-claude"], |doc| {
        let routes = doc["routes"].as_array_mut().unwrap();
        routes.last_mut().unwrap().as_table_mut().unwrap().insert("attempt_timeout".into(), "1s".into());
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "stream-cut", 1).unwrap();
    gw.sim().queue(Some("sim:ok"), "hang", 1).unwrap();
    let key = "silent-continuation";
    let (status, chunks) = stream(&gw, &route, key).await;
    assert_eq!((status, text_of(&chunks)), (200, format!("echo: {}", prompt(key))), "{chunks:?}");
    let job = common::job_of_key(&gw, key).await;
    let attempts = job["attempts"].as_array().unwrap();
    let seen: Vec<(&str, Option<i64>)> =
        attempts.iter().map(|a| (a["state"].as_str().unwrap(), a["continues"].as_i64())).collect();
    assert_eq!(seen, [("unknown", None), ("unknown", Some(1)), ("succeeded", Some(2))], "{job}");
    assert_eq!(job["executions"], json!({"answered": 1, "may_have_run": 2}), "{job}");
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, ANTHROPIC)), (1, 2), "one call each");
}

/// A re-run that says something else where the client already has text
/// (here a model that answers in JSON) has diverged: it is never spliced
/// on. Its attempt fails, the chain has no one left, and the client is told
/// in band after what it had.
async fn a_re_run_that_says_something_else_is_not_spliced_on(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-primary", "sim-sloppy"], |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "stream-cut", 1).unwrap();
    let key = "diverged";
    let (status, chunks) = stream(&gw, &route, key).await;
    assert_eq!(status, 200);
    let text = text_of(&chunks);
    assert!(
        !text.is_empty()
            && format!("echo: {}", prompt(key)).starts_with(&text)
            && text.len() < prompt(key).len(),
        "{text:?}"
    );
    assert!(chunks.last().unwrap().get("error").is_some(), "an in-band error: {chunks:?}");
    let job = common::job_of_key(&gw, key).await;
    assert_eq!(job["status"], "failed", "{job}");
    let second = &job["attempts"][1];
    assert_eq!((second["state"].as_str(), second["provider"].as_str()), (Some("failed"), Some("sim-sloppy")));
    assert!(second["detail"].as_str().unwrap().contains("diverged"), "{second}");
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), gw.sim().calls().total),
        (2, 2),
        "one call each, nothing more"
    );
}

/// Part of a tool call reached the client when the stream broke: another
/// execution's arguments spliced on could make a call no model made, so
/// the stream ends as without the option, and no one else is asked.
async fn a_cut_tool_call_is_not_continued(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-tools", "sim-tools-fallback"], |_| {}).await;
    gw.sim().queue(Some("sim:tool_call"), "stream-cut", 1).unwrap();
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let request = json!({"model": route, "stream": true, "tools": tools,
        "messages": [{"role": "user", "content": "the weather in a city with a long name"}]});
    let response = gw.chat_completion("cut-tool", &request).await;
    let chunks = common::chunks_of(&response.text().await.unwrap());
    assert!(
        chunks.iter().any(|chunk| chunk["choices"][0]["delta"].get("tool_calls").is_some()),
        "{chunks:?}"
    );
    assert_eq!(chunks.last().unwrap()["error"]["code"], "outcome-unknown", "{chunks:?}");
    let job = common::job_of_key(&gw, "cut-tool").await;
    assert_eq!(
        (job["status"].as_str(), job["attempts"].as_array().unwrap().len()),
        (Some("failed"), 1),
        "{job}"
    );
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, ANTHROPIC)), (1, 0), "not continued");
}

/// A Messages request (an agent's) whose primary speaks OpenAI: its stream
/// reaches the client translated, and the Anthropic fallback that
/// continues it — which would pass the request through — joins in the
/// same translation: one message, one text block, the whole text.
async fn through_the_messages_door_the_continued_stream_is_one_message(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-primary", "sim-fallback"], |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "stream-cut", 1).unwrap();
    assert_one_message(&messages_stream(&gw, &route, "s08-messages").await, "s08-messages");
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, ANTHROPIC)), (1, 1));
}

/// A Messages request on a Claude provider streams Claude's own events
/// (an agent's thinking, signatures and cache usage intact). Cut in its
/// text, it is continued by the next provider that speaks Messages too —
/// an OpenAI one between them is passed over, and says why — prefilled, its
/// events going on in the block the client has open: one message.
async fn a_passed_through_stream_is_continued_by_a_provider_that_speaks_its_protocol(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-fallback", "sim-primary", "sim-claude"], |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "stream-cut", 1).unwrap();
    let events = messages_stream(&gw, &route, "native-cut").await;
    assert_one_message(&events, "native-cut");
    assert!(events.iter().all(|event| event["type"] != "error"), "{events:?}");
    assert_eq!((common::calls_at(&gw, ANTHROPIC), common::calls_at(&gw, PRIMARY)), (2, 0), "Claude twice");
    let job = common::job_of_key(&gw, "native-cut").await;
    let states: Vec<&str> =
        job["attempts"].as_array().unwrap().iter().map(|a| a["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["unknown", "succeeded"], "{job}");
    assert_eq!(job["result"]["provider"], "sim-claude", "{job}");
    let message = &job["result"]["native"];
    assert_eq!(
        message["content"][0]["text"],
        format!("echo: {}", prompt("native-cut")),
        "one message: {job}"
    );
}

/// With no provider left that speaks Messages, the passed-through stream
/// cannot be continued: it ends with an in-band error, and no other
/// provider is sent anything.
async fn a_passed_through_stream_no_provider_can_continue_in_its_protocol_ends(store: TestStore) {
    let (gw, route) = continuing(&store, &["sim-fallback", "sim-primary"], |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "stream-cut", 1).unwrap();
    let events = messages_stream(&gw, &route, "native-alone").await;
    assert_eq!(events.last().unwrap()["type"], "error", "told in band: {events:?}");
    let job = common::job_of_key(&gw, "native-alone").await;
    assert_eq!(job["status"], "failed", "{job}");
    assert!(job["error"].to_string().contains("sim-primary"), "{job}");
    assert_eq!((common::calls_at(&gw, ANTHROPIC), common::calls_at(&gw, PRIMARY)), (1, 0), "not continued");
}

/// The events of `key`'s Messages stream are one message: one start, one
/// text block, one stop, and the whole text.
fn assert_one_message(events: &[Value], key: &str) {
    let count = |kind: &str| events.iter().filter(|event| event["type"] == kind).count();
    assert_eq!(
        (count("message_start"), count("content_block_start"), count("message_stop")),
        (1, 1, 1),
        "{events:?}"
    );
    let text: String = events.iter().filter_map(|event| event["delta"]["text"].as_str()).collect();
    assert_eq!(text, format!("echo: {}", prompt(key)));
}

/// A streamed Messages request on `route` under `key`: its events.
async fn messages_stream(gw: &TestGateway, route: &str, key: &str) -> Vec<Value> {
    let request = json!({"model": route, "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": prompt(key)}]});
    let response = gw.post_door("/v1/messages", key, &request).await;
    assert_eq!(response.status(), 200);
    common::chunks_of(&response.text().await.unwrap())
}
