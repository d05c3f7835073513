//! What becomes of each part of a Messages request on a provider that does
//! not speak Anthropic's protocol: the one table (docs/anthropic.md prints
//! it). An Anthropic provider is sent the request as the client sent it
//! whatever this table says; another dialect gets the job's chat view,
//! which holds what is `Translated`, leaves out what is a `Hint`, and
//! cannot hold what is `Untranslated` — then that provider is passed over
//! with the reason, never sent the request without it.

use serde_json::Value;

pub use crate::api::door::Carried;

/// The top-level fields. One not listed is `Untranslated`: an unknown
/// field is assumed to matter.
const FIELDS: &[(&str, Carried)] = &[
    ("model", Carried::Translated),
    ("messages", Carried::Translated),
    ("max_tokens", Carried::Translated),
    ("system", Carried::Translated),
    ("stream", Carried::Translated),
    ("temperature", Carried::Translated),
    ("top_p", Carried::Translated),
    ("top_k", Carried::Translated),
    ("stop_sequences", Carried::Translated),
    ("tools", Carried::Translated),
    ("tool_choice", Carried::Translated),
    // `user_id` becomes `user`; the rest is the caller's bookkeeping.
    ("metadata", Carried::Translated),
    ("cache_control", Carried::Hint),
    ("context_management", Carried::Hint),
    ("service_tier", Carried::Hint),
    ("container", Carried::Untranslated),
    ("mcp_servers", Carried::Untranslated),
];

/// How the top-level field `name` with `value` is carried. A few depend on
/// the value: thinking turned off, or an `output_config` that only sets a
/// JSON schema (which becomes `response_format`), translate.
pub fn top_level(name: &str, value: &Value) -> Carried {
    match name {
        "thinking" if value["type"] == "disabled" || value.is_null() => Carried::Translated,
        "output_config" if output_format_only(value) => Carried::Translated,
        _ => FIELDS.iter().find(|(field, _)| *field == name).map_or(Carried::Untranslated, |(_, how)| *how),
    }
}

/// Whether `output_config` holds nothing but a JSON-schema `format`.
fn output_format_only(value: &Value) -> bool {
    let Some(config) = value.as_object() else { return false };
    config
        .iter()
        .all(|(key, inner)| key == "format" && inner["type"] == "json_schema" && inner["schema"].is_object())
}

/// How a content block of `kind` in a turn is carried: text, images, tool
/// calls and their results translate; thinking blocks are signed by the
/// provider that wrote them and go to no other; any other kind (documents,
/// server tools' blocks) has no chat form.
pub fn block(kind: &str) -> Carried {
    match kind {
        "text" | "image" | "tool_use" | "tool_result" => Carried::Translated,
        _ => Carried::Untranslated,
    }
}

/// How a tool is carried: a client tool (a name and an input schema)
/// translates to a function; a server tool (`web_search_…`, `bash_…`) runs
/// at Anthropic and has no chat form.
pub fn tool(tool: &Value) -> Carried {
    match tool["type"].as_str() {
        None | Some("custom") => Carried::Translated,
        Some(_) => Carried::Untranslated,
    }
}

/// The request headers that change what an Anthropic provider does, and
/// so are part of the intent and carried to it.
pub const CARRIED_HEADERS: &[&str] = &["anthropic-beta", "anthropic-version"];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn thinking_translates_only_when_off() {
        assert_eq!(top_level("thinking", &json!({"type": "disabled"})), Carried::Translated);
        assert_eq!(top_level("thinking", &json!({"type": "adaptive"})), Carried::Untranslated);
        assert_eq!(
            top_level("thinking", &json!({"type": "enabled", "budget_tokens": 2048})),
            Carried::Untranslated
        );
    }

    #[test]
    fn an_output_schema_translates_and_effort_does_not() {
        let schema = json!({"format": {"type": "json_schema", "schema": {"type": "object"}}});
        assert_eq!(top_level("output_config", &schema), Carried::Translated);
        assert_eq!(top_level("output_config", &json!({"effort": "high"})), Carried::Untranslated);
    }

    #[test]
    fn unknown_fields_are_assumed_to_matter_and_hints_are_named() {
        assert_eq!(top_level("some_future_field", &json!(1)), Carried::Untranslated);
        assert_eq!(top_level("context_management", &json!({})), Carried::Hint);
        assert_eq!(block("redacted_thinking"), Carried::Untranslated);
        assert_eq!(
            tool(&json!({"type": "web_search_20250305", "name": "web_search"})),
            Carried::Untranslated
        );
        assert_eq!(tool(&json!({"name": "f", "input_schema": {}})), Carried::Translated);
    }
}
