//! The fingerprint of each door's requests, pinned: a job's fingerprint
//! (and the key a keyless request derives from it) must not change when
//! the code that builds the job request does, or a retry that spans an
//! upgrade would find no job and run its intent a second time. The
//! expected values were taken from the code before doors were typed.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::Door;
use crate::api::anthropic::Messages;
use crate::api::embeddings::Embeddings;
use crate::api::openai::ChatCompletions;
use crate::api::responses::Responses;
use crate::jobs::{IdempotencyKey, NewJob, sha256_hex};

/// The fingerprint of `body` through door `D`, and a hash of the stored
/// canonical form.
fn fingerprint<D: Door>(body: &Value, headers: &[(&'static str, &'static str)]) -> (String, String) {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    let bytes = Bytes::from(body.to_string());
    let translated =
        D::translate(&bytes, &map).map_err(|problem| format!("{problem:?}")).expect("translates");
    let new = NewJob::new("owner".into(), IdempotencyKey::minted(), translated.job).expect("a job");
    (new.fingerprint.as_str().to_owned(), sha256_hex(new.canonical.as_bytes()))
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/bodies/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

fn chat_bodies() -> Vec<Value> {
    vec![
        json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}),
        json!({"model": "chat", "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.5,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        json!({"model": "chat", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "messages": [{"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}], "stream": false, "max_tokens": 100, "top_p": 1.0}),
    ]
}

fn messages_bodies() -> Vec<Value> {
    vec![
        fixture("claude_code_turn.json"),
        json!({"model": "chat", "max_tokens": 64, "system": "Be brief.", "stream": true,
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}, "description": "d"}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "metadata": {"user_id": "u1"}, "temperature": 0.2, "stop_sequences": ["x"],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Utrecht"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny", "is_error": true},
                    {"type": "text", "text": "And tomorrow?"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}),
        json!({"model": "chat", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048},
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s1"}, {"type": "text", "text": "hello"}]},
                {"role": "system", "content": [{"type": "text", "text": "note"}]},
                {"role": "user", "content": [{"type": "document", "source": {}}, {"type": "text", "text": "and?"}]}]}),
    ]
}

fn responses_bodies() -> Vec<Value> {
    vec![
        fixture("codex_turn.json"),
        json!({"model": "chat", "input": "hi"}),
        json!({"model": "chat", "instructions": "Be brief.", "stream": true, "max_output_tokens": 100,
            "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}}},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "f"}, "store": false,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": "https://e/a.png"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "f"},
                {"type": "function_call_output", "call_id": "c1", "output": {"ok": true}},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]}),
    ]
}

fn embeddings_bodies() -> Vec<Value> {
    vec![
        json!({"model": "embeddings", "input": "a"}),
        json!({"model": "embeddings", "input": ["a", "b"], "dimensions": 8, "encoding_format": "float"}),
    ]
}

fn jobs_bodies() -> Vec<Value> {
    vec![
        json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}),
        json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}, "params": {"stream": true, "max_tokens": 5}}),
        json!({"route": "embeddings", "input": {"embed": ["a"]}, "params": {"dimensions": 4}}),
    ]
}

/// Every door's fingerprints and stored forms, as they were.
#[test]
fn every_doors_fingerprints_are_unchanged() {
    let beta = [("anthropic-beta", "interleaved-thinking-2025-05-14"), ("anthropic-version", "2023-06-01")];
    let mut seen = Vec::new();
    seen.extend(chat_bodies().iter().map(|body| fingerprint::<ChatCompletions>(body, &[])));
    seen.extend(messages_bodies().iter().map(|body| fingerprint::<Messages>(body, &beta)));
    seen.extend(responses_bodies().iter().map(|body| fingerprint::<Responses>(body, &[])));
    seen.extend(embeddings_bodies().iter().map(|body| fingerprint::<Embeddings>(body, &[])));
    seen.extend(jobs_bodies().iter().map(|body| {
        let request = crate::api::job_request::parse(body.clone()).expect("a job request");
        let new = NewJob::new("owner".into(), IdempotencyKey::minted(), request).expect("a job");
        (new.fingerprint.as_str().to_owned(), sha256_hex(new.canonical.as_bytes()))
    }));
    let expected: Vec<(String, String)> =
        EXPECTED.iter().map(|(f, c)| ((*f).to_owned(), (*c).to_owned())).collect();
    assert_eq!(seen, expected);
}

const EXPECTED: [(&str, &str); 14] = [
    (
        "270ed2eebeeb352fc717d931bf4d82b84f5e14536473a5690c2dbbc9eb51048c",
        "270ed2eebeeb352fc717d931bf4d82b84f5e14536473a5690c2dbbc9eb51048c",
    ),
    (
        "863f33f0268c893cc59741de46628913bd26910169ecaffb2530bf14fa321f8b",
        "7c0d792c4bef7a347baaf6d77738b052f52db8be9160681ec3fe80d51364720d",
    ),
    (
        "42d7b493a4f0d2c793ef0aa18f44770634feca9f0dbdb3c2a259467c3eff6dfb",
        "42d7b493a4f0d2c793ef0aa18f44770634feca9f0dbdb3c2a259467c3eff6dfb",
    ),
    (
        "25d3998972084c620a2e5356bfdaba252a48275ee52a2e27f227915ec6d850b7",
        "25d3998972084c620a2e5356bfdaba252a48275ee52a2e27f227915ec6d850b7",
    ),
    (
        "f3375c98435e6944d52b1f3131c5d5d5f5f9dbbbb1815b8f48adb2a47d79bd26",
        "91ed0e373bbc9867a6599c9c3ef85ec4ccfae137a71acc97de49ce0bfdba4ad3",
    ),
    (
        "c8ec288dc75090dda158b24df42d54dfde03cf29bbe4ba8a6eb6faecb7eff389",
        "c8ec288dc75090dda158b24df42d54dfde03cf29bbe4ba8a6eb6faecb7eff389",
    ),
    (
        "7eaac29eed679c0689082f074cd362f0f3b2d26392360b175e05be5f24a7d191",
        "35ace09617deb4917aa13cfe386907891f1d8fddb62bc100693ed2e91e9e9a7a",
    ),
    (
        "95841bae114f23f21d6773ca7dee980ef133cb654531da65089d8848e1391b5e",
        "95841bae114f23f21d6773ca7dee980ef133cb654531da65089d8848e1391b5e",
    ),
    (
        "5fd7c7c31e9efce003a0df5d8aff91cdf81a3a887818d9e461edb140255ecbe2",
        "b78a3aefaef2c33f615796780cf68f32408174d8a936a0b005ac832c11600513",
    ),
    (
        "9f00b5adeea96c035f921b85aac15064f6c88847cbb029bbf20ff5795e935f72",
        "9f00b5adeea96c035f921b85aac15064f6c88847cbb029bbf20ff5795e935f72",
    ),
    (
        "90177c462abc788dea5d58c39e24a7a728ab5cd536f7b5058141925b5a6b8194",
        "90177c462abc788dea5d58c39e24a7a728ab5cd536f7b5058141925b5a6b8194",
    ),
    (
        "270ed2eebeeb352fc717d931bf4d82b84f5e14536473a5690c2dbbc9eb51048c",
        "270ed2eebeeb352fc717d931bf4d82b84f5e14536473a5690c2dbbc9eb51048c",
    ),
    (
        "82a37330707d6549e40f095e747fc53cd93d03adc8d90e2af5d97b726c8004fd",
        "8e31d8f4d08a95af685f17f524e7f9da321a3e164ae73799a96edc4c64ac6297",
    ),
    (
        "7e228f9d6054a740f8def8f3141296fc9500d2e0dfb063667e616e02b72e09a4",
        "7e228f9d6054a740f8def8f3141296fc9500d2e0dfb063667e616e02b72e09a4",
    ),
];
