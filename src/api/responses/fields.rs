//! What becomes of each part of a Responses request on a provider that does
//! not speak the Responses API: the one table (docs/responses.md prints
//! it). A Responses provider is sent the request as the client sent it;
//! another dialect gets the job's chat view, which holds what is
//! `Translated`, leaves out what is a `Hint`, and cannot hold what is
//! `Untranslated` — then that provider is passed over with the reason.

use serde_json::Value;

pub use crate::api::door::Carried;

/// The top-level fields. One not listed is `Untranslated`: an unknown
/// field is assumed to matter.
const FIELDS: &[(&str, Carried)] = &[
    ("model", Carried::Translated),
    ("input", Carried::Translated),
    ("instructions", Carried::Translated),
    ("tools", Carried::Translated),
    ("tool_choice", Carried::Translated),
    ("parallel_tool_calls", Carried::Translated),
    // Its `format` becomes `response_format`; its `verbosity` is a hint.
    ("text", Carried::Translated),
    ("max_output_tokens", Carried::Translated),
    ("temperature", Carried::Translated),
    ("top_p", Carried::Translated),
    ("metadata", Carried::Translated),
    ("user", Carried::Translated),
    ("previous_response_id", Carried::Translated),
    ("stream", Carried::Translated),
    ("background", Carried::Translated),
    // The gateway keeps every job; a Responses provider is sent the
    // client's own choice.
    ("store", Carried::Translated),
    // `effort` becomes chat's `reasoning_effort`; a `summary` is a hint.
    ("reasoning", Carried::Translated),
    ("prompt_cache_key", Carried::Hint),
    ("prompt_cache_retention", Carried::Hint),
    ("client_metadata", Carried::Hint),
    ("safety_identifier", Carried::Hint),
    ("service_tier", Carried::Hint),
    ("stream_options", Carried::Hint),
    ("max_tool_calls", Carried::Untranslated),
    ("prompt", Carried::Untranslated),
    ("conversation", Carried::Untranslated),
];

/// What `include` may ask for that a translation can leave out: encrypted
/// reasoning is included only by a provider that reasons in items, and a
/// chat provider sends none to include.
const INCLUDE_HINTS: &[&str] = &["reasoning.encrypted_content"];

/// How the top-level field `name` with `value` is carried. A few depend on
/// the value: nothing asked (`include: []`, `top_logprobs: 0`,
/// `truncation: "disabled"`) translates as nothing.
pub fn top_level(name: &str, value: &Value) -> Carried {
    match name {
        _ if is_nothing(value) => Carried::Translated,
        "include" => match value.as_array() {
            Some(asked) if asked.iter().all(|a| a.as_str().is_some_and(|a| INCLUDE_HINTS.contains(&a))) => {
                Carried::Hint
            }
            _ => Carried::Untranslated,
        },
        "truncation" if value == "disabled" => Carried::Translated,
        "truncation" => Carried::Hint,
        "top_logprobs" if value.as_u64() == Some(0) => Carried::Translated,
        _ => FIELDS.iter().find(|(field, _)| *field == name).map_or(Carried::Untranslated, |(_, how)| *how),
    }
}

fn is_nothing(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.values().all(Value::is_null),
        _ => false,
    }
}

/// How an input item of `kind` is carried: messages, function calls and
/// their outputs translate; reasoning items are encrypted by the provider
/// that wrote them and go to no other; any other kind (custom and built-in
/// tools' calls, item references) has no chat form.
pub fn item(kind: &str) -> Carried {
    match kind {
        "message" | "function_call" | "function_call_output" => Carried::Translated,
        _ => Carried::Untranslated,
    }
}

/// How a tool is carried: a function translates; a custom (free-form) or
/// built-in tool (web search, shell, MCP) has no chat form.
pub fn tool(tool: &Value) -> Carried {
    match tool["type"].as_str() {
        Some("function") => Carried::Translated,
        _ => Carried::Untranslated,
    }
}

/// The request headers that change what a Responses provider does, and so
/// are part of the intent and carried to it.
pub const CARRIED_HEADERS: &[&str] = &["openai-beta"];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn codex_fields_are_hints_or_translated_and_unknown_ones_matter() {
        assert_eq!(top_level("include", &json!(["reasoning.encrypted_content"])), Carried::Hint);
        assert_eq!(top_level("include", &json!(["message.output_text.logprobs"])), Carried::Untranslated);
        assert_eq!(top_level("include", &json!([])), Carried::Translated);
        assert_eq!(top_level("prompt_cache_key", &json!("session-1")), Carried::Hint);
        assert_eq!(
            top_level("reasoning", &json!({"effort": "high", "summary": "auto"})),
            Carried::Translated
        );
        assert_eq!(top_level("some_future_field", &json!(1)), Carried::Untranslated);
        assert_eq!(item("reasoning"), Carried::Untranslated);
        assert_eq!(tool(&json!({"type": "custom", "name": "apply_patch"})), Carried::Untranslated);
        assert_eq!(tool(&json!({"type": "function", "name": "shell"})), Carried::Translated);
    }
}
