//! Per-provider request overrides: what a deployment adds to, or replaces
//! in, every request sent to one provider, whoever the caller is (a job, a
//! chat completion, a contract run). They let one model be declared twice,
//! e.g. plain and grammar-constrained through `response_format`, so that a
//! contract can tell the two apart.

use serde_json::{Map, Value};

/// Applies the cap, then the overrides, to an encoded request body.
///
/// - `max_temperature`: a higher (or missing) `temperature` becomes the
///   cap, so a caller cannot ask this provider for more randomness than the
///   deployment allows and a provider default cannot exceed it either.
/// - `overrides`: each top-level field replaces the caller's field of the
///   same name whole (no deep merge: a `response_format` override replaces
///   the caller's `response_format`, it is not mixed with it). `model` and
///   `stream` are not overridable: the adapter owns them.
pub(crate) fn apply(body: &mut Value, overrides: &Map<String, Value>, max_temperature: Option<f64>) {
    let Some(object) = body.as_object_mut() else { return };
    if let Some(cap) = max_temperature {
        let asked = object.get("temperature").and_then(Value::as_f64);
        if asked.is_none_or(|t| t > cap) {
            object.insert("temperature".into(), cap.into());
        }
    }
    for (key, value) in overrides {
        if key != "model" && key != "stream" {
            object.insert(key.clone(), value.clone());
        }
    }
}

/// `content: null` (or absent) on assistant messages becomes `""`, for a
/// server that refuses null where OpenAI allows it (see
/// `ProviderSettings::null_content_as_empty`). Nothing else changes.
pub(crate) fn null_content_as_empty(body: &mut Value) {
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else { return };
    for message in messages.iter_mut().filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
    {
        if let Some(fields) = message.as_object_mut()
            && fields.get("content").is_none_or(Value::is_null)
        {
            fields.insert("content".into(), Value::String(String::new()));
        }
    }
}

/// A provider's `max_temperature` where a translated dialect takes the
/// temperature, inside `member` (Gemini's `generationConfig`, Converse's
/// `inferenceConfig`): a higher (or missing) temperature there becomes the
/// cap. Applied after the request overrides, so an override cannot lift it.
pub(crate) fn cap_temperature_in(body: &mut Value, member: &str, cap: f64) {
    let Some(object) = body.as_object_mut() else { return };
    let config = object.entry(member).or_insert_with(|| Value::Object(Map::new()));
    if let Some(config) = config.as_object_mut() {
        let asked = config.get("temperature").and_then(Value::as_f64);
        if asked.is_none_or(|t| t > cap) {
            config.insert("temperature".into(), cap.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn overrides_replace_whole_fields_and_win_over_the_caller() {
        let mut body = json!({
            "model": "m", "stream": true, "temperature": 0.7, "top_k": 3,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}
        });
        let overrides = map(json!({
            "response_format": {"type": "json_object", "schema": {"type": "object"}},
            "temperature": 0, "seed": 7, "model": "nope", "stream": false
        }));
        apply(&mut body, &overrides, None);
        assert_eq!(
            body,
            json!({
                "model": "m", "stream": true, "temperature": 0, "top_k": 3, "seed": 7,
                "response_format": {"type": "json_object", "schema": {"type": "object"}}
            })
        );
    }

    #[test]
    fn the_temperature_cap_lowers_and_fills_in() {
        for (asked, sent) in [(Some(0.9), 0.2), (Some(0.1), 0.1), (None, 0.2)] {
            let mut body = json!({"messages": []});
            if let Some(t) = asked {
                body["temperature"] = json!(t);
            }
            apply(&mut body, &Map::new(), Some(0.2));
            assert_eq!(body["temperature"], json!(sent), "{asked:?}");
        }
        // An explicit override still wins over the cap.
        let mut body = json!({"temperature": 0.9});
        apply(&mut body, &map(json!({"temperature": 0.5})), Some(0.2));
        assert_eq!(body["temperature"], json!(0.5));
    }

    #[test]
    fn null_assistant_content_becomes_empty_and_nothing_else_changes() {
        let mut body = json!({"messages": [
            {"role": "user", "content": null},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]},
            {"role": "assistant", "tool_calls": [{"id": "d"}]},
            {"role": "assistant", "content": "kept"}
        ]});
        null_content_as_empty(&mut body);
        assert_eq!(body["messages"][0]["content"], Value::Null, "only assistant messages");
        assert_eq!(body["messages"][1]["content"], "");
        assert_eq!(body["messages"][2]["content"], "");
        assert_eq!(body["messages"][3]["content"], "kept");
    }
}
