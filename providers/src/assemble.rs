//! A streamed answer's chunks, assembled into the `chat.completion` it adds
//! up to — the same shape a plain call answers, so that contract checks,
//! the job's stored result and the native API read one shape either way.
//!
//! Per choice `index`: `content` and `refusal` fragments are concatenated,
//! `tool_calls` fragments are merged by their own `index` (the first
//! fragment brings `id`, `type` and the function's `name`; `arguments`
//! arrive in pieces), `logprobs.content` entries are appended, and the last
//! `finish_reason` wins. Top-level `model`, `system_fingerprint` and `usage`
//! (the `include_usage` chunk) are taken from the chunks that carry them.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

#[derive(Default)]
struct Choice {
    role: Option<Value>,
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u64, Map<String, Value>>,
    logprobs: Vec<Value>,
    finish_reason: Value,
}

/// The completion `chunks` (OpenAI `chat.completion.chunk` objects, in the
/// order they arrived) add up to. Owned or shared: a live stream keeps its
/// chunks in `Arc`s, which its readers hold too.
pub fn assemble<C: std::borrow::Borrow<Value>>(chunks: &[C]) -> Value {
    let mut choices: BTreeMap<u64, Choice> = BTreeMap::new();
    let mut top = Map::new();
    for chunk in chunks {
        let chunk: &Value = chunk.borrow();
        for key in ["id", "created", "model", "system_fingerprint", "service_tier", "usage"] {
            if let Some(value) = chunk.get(key).filter(|v| !v.is_null()) {
                top.insert(key.to_owned(), value.clone());
            }
        }
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let into = choices.entry(index).or_default();
            if let Some(reason) = choice.get("finish_reason").filter(|v| !v.is_null()) {
                into.finish_reason = reason.clone();
            }
            if let Some(entries) = choice.pointer("/logprobs/content").and_then(Value::as_array) {
                into.logprobs.extend(entries.iter().cloned());
            }
            let Some(delta) = choice.get("delta") else { continue };
            if let Some(role) = delta.get("role").filter(|v| !v.is_null()) {
                into.role = Some(role.clone());
            }
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                into.content.get_or_insert_with(String::new).push_str(text);
            }
            if let Some(text) = delta.get("refusal").and_then(Value::as_str) {
                into.refusal.get_or_insert_with(String::new).push_str(text);
            }
            for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                merge_tool_call(&mut into.tool_calls, call);
            }
        }
    }
    let choices: Vec<Value> = choices.into_iter().map(|(index, choice)| choice.into_value(index)).collect();
    let mut completion = Map::new();
    completion.insert("object".into(), "chat.completion".into());
    completion.extend(top);
    completion.insert("choices".into(), Value::Array(choices));
    Value::Object(completion)
}

fn merge_tool_call(calls: &mut BTreeMap<u64, Map<String, Value>>, fragment: &Value) {
    let index = fragment.get("index").and_then(Value::as_u64).unwrap_or(0);
    let call = calls.entry(index).or_default();
    for key in ["id", "type"] {
        if let Some(value) = fragment.get(key).filter(|v| !v.is_null()) {
            call.insert(key.to_owned(), value.clone());
        }
    }
    let Some(function) = fragment.get("function") else { return };
    let into = call.entry("function").or_insert_with(|| json!({"arguments": ""}));
    let Some(into) = into.as_object_mut() else { return };
    if let Some(name) = function.get("name").filter(|v| !v.is_null()) {
        into.insert("name".into(), name.clone());
    }
    if let Some(piece) = function.get("arguments").and_then(Value::as_str) {
        let so_far = into.get("arguments").and_then(Value::as_str).unwrap_or_default();
        let joined = format!("{so_far}{piece}");
        into.insert("arguments".into(), joined.into());
    }
}

impl Choice {
    fn into_value(self, index: u64) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), self.role.unwrap_or_else(|| "assistant".into()));
        message.insert("content".into(), self.content.map_or(Value::Null, Value::String));
        if let Some(refusal) = self.refusal {
            message.insert("refusal".into(), refusal.into());
        }
        if !self.tool_calls.is_empty() {
            let calls = self.tool_calls.into_values().map(Value::Object).collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut choice = json!({"index": index, "message": message, "finish_reason": self.finish_reason});
        if !self.logprobs.is_empty()
            && let Some(object) = choice.as_object_mut()
        {
            object.insert("logprobs".into(), json!({"content": self.logprobs}));
        }
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_fragments_and_choices_are_merged_by_index() {
        let chunks = vec![
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}}]}),
            json!({"choices": [{"index": 1, "delta": {"content": "Hi"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Utrecht\"}"}}]}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}),
        ];
        let completion = assemble(&chunks);
        let call = &completion["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["function"]["name"], "get_weather");
        assert_eq!(call["function"]["arguments"], "{\"city\":\"Utrecht\"}");
        assert!(completion["choices"][0]["message"]["content"].is_null());
        assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(completion["choices"][1]["message"]["content"], "Hi");
        assert_eq!(completion["choices"][1]["finish_reason"], "stop");
        assert_eq!(completion["usage"]["total_tokens"], 7);
        assert_eq!(completion["model"], "m");
    }
}
