//! No NUL (U+0000) in any text that reaches the store. PostgreSQL's TEXT
//! (and JSONB) cannot hold it and fails the statement (a 500, possibly
//! after the job was committed), while SQLite stores it: refusing it at the
//! door with a 422 makes both stores answer alike and before anything is
//! written. The request body is checked whole (every string and key: it is
//! stored as text and sent on); the few other texts (a resolve reason, a
//! provider name in a path) one by one.

use serde_json::Value;

use super::{Problem, ProblemType};

/// Refuses `value` if any string or key in it holds a NUL, naming the JSON
/// pointer (RFC 6901) of the first one.
pub fn refuse_nul_in_json(value: &Value) -> Result<(), Problem> {
    match nul_at(value) {
        Some(path) => {
            let at = if path.is_empty() { "the body".to_owned() } else { format!("`{path}`") };
            Err(nul_problem(format!(
                "the text at {at} holds a NUL character (\\u0000), which cannot be stored"
            ))
            .with("path", path))
        }
        None => Ok(()),
    }
}

/// Refuses `text` (what `what` names, e.g. "`reason`") if it holds a NUL.
pub fn refuse_nul(what: &str, text: &str) -> Result<(), Problem> {
    if text.contains('\0') {
        Err(nul_problem(format!("{what} holds a NUL character (\\u0000), which cannot be stored")))
    } else {
        Ok(())
    }
}

/// Refuses a raw query string whose decoded text would hold a NUL.
pub fn refuse_nul_in_query(query: &str) -> Result<(), Problem> {
    if query.to_ascii_lowercase().contains("%00") {
        Err(nul_problem("the query holds a NUL character (%00), which no stored text can match".to_owned()))
    } else {
        Ok(())
    }
}

fn nul_problem(detail: String) -> Problem {
    Problem::new(ProblemType::InvalidBody, detail).titled("NUL in text")
}

/// The pointer of the first string or key holding a NUL.
fn nul_at(value: &Value) -> Option<String> {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::String(text) => text.contains('\0').then(String::new),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| nul_at(item).map(|rest| format!("/{index}{rest}"))),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(format!("/{}", escape(key)))
            } else {
                nul_at(item).map(|rest| format!("/{}{rest}", escape(key)))
            }
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_the_first_nul_with_its_pointer() {
        assert_eq!(nul_at(&json!({"a": ["x", {"b/c": "y\u{0}"}]})), Some("/a/1/b~1c".to_owned()));
        assert_eq!(nul_at(&json!({"k\u{0}": 1})), Some("/k\u{0}".to_owned()));
        assert_eq!(nul_at(&json!("\u{0}")), Some(String::new()));
        assert_eq!(nul_at(&json!({"a": ["x", 1, null, {"b": "\\u0000"}]})), None);
    }
}
