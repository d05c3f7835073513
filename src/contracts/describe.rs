//! How a contract check names what it found in its reasons: a value by its
//! JSON type, a text by its start on one line. Shared by the shape and the
//! tool-call checks, so both read alike.

use serde_json::Value;

use crate::jobs::json_kind;

/// The longest piece of a bad answer quoted in a reason; reasons are
/// stored, answers can be large.
const EXCERPT_CHARS: usize = 80;

/// A value's JSON type, bare (`array`), for "is {type}, not …".
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value for a reason: short strings quoted, anything else by type.
pub(super) fn short(value: &Value) -> String {
    match value {
        Value::String(text) => format!("`{}`", excerpt(text)),
        other => json_kind(other).to_owned(),
    }
}

/// The start of `text` on one line, at most [`EXCERPT_CHARS`] characters.
pub(super) fn excerpt(text: &str) -> String {
    let flat: String = text.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match flat.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
