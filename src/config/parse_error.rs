//! A configuration file that does not parse, described without its text.
//!
//! toml's own description quotes the offending line under a caret, and a
//! line of this file can hold a secret: `store.url` carries the database
//! password, a provider may carry a key. The description reaches the 422 of
//! a refused reload, its log line and `intentgate config check`, so it says
//! *where* (line, column, the key the line sets) and *what* (toml's
//! message, any double-quoted text in it elided, since serde quotes a
//! mistyped string value whole), and never what the line says.

use std::collections::HashMap;

/// `err`, raised parsing `text`: `line L, column C (key `K`): message`.
pub(super) fn describe(text: &str, err: &toml::de::Error) -> String {
    let message = without_quoted_text(err.message().trim_end());
    let Some(offset) = err.span().map(|span| span.start.min(text.len())) else {
        return message;
    };
    let before = text.get(..offset).unwrap_or_default();
    let line = before.matches('\n').count();
    let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    let key = key_on_line(text, line).map(|key| format!(" (key `{key}`)")).unwrap_or_default();
    format!("line {}, column {column}{key}: {message}", line + 1)
}

/// `message` with the text between each pair of double quotes replaced by
/// `…`: serde's `invalid type: string "…"` quotes the value it was given.
fn without_quoted_text(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for (index, part) in message.split('"').enumerate() {
        if index % 2 == 0 {
            out.push_str(part);
        } else {
            out.push_str("\"…\"");
        }
    }
    out
}

/// The dotted path of the key that line `line` (from 0) of `text` sets —
/// its table (`[[providers]]` numbered as the configuration's messages
/// number them: `providers[2]`) and the name before its `=` — when both
/// read as plain keys; the table alone when the line sets no plain key.
/// Best effort, read line by line: a line inside a multi-line value is
/// named after the table it sits in.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let mut table: Option<String> = None;
    let mut arrays: HashMap<&str, usize> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if index == line {
            if trimmed.starts_with('[') {
                return None;
            }
            let key = trimmed.split_once('=').map(|(key, _)| key.trim()).filter(|key| is_plain_key(key));
            return match (table, key) {
                (Some(table), Some(key)) => Some(format!("{table}.{key}")),
                (None, Some(key)) => Some(key.to_owned()),
                (table, None) => table,
            };
        }
        if let Some(name) = header(trimmed, "[[", "]]") {
            let next = arrays.entry(name).or_insert(0);
            table = Some(format!("{name}[{next}]"));
            *next += 1;
        } else if let Some(name) = header(trimmed, "[", "]") {
            table = Some(name.to_owned());
        } else if trimmed.starts_with('[') {
            table = None;
        }
    }
    None
}

/// The name of a table header line (`[name]` or `[[name]]`), if it is one
/// naming a plain key.
fn header<'a>(line: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let (name, _) = line.strip_prefix(open)?.split_once(close)?;
    let name = name.trim();
    is_plain_key(name).then_some(name)
}

/// A bare or dotted key: letters, digits, `_`, `-`, `.`.
fn is_plain_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe_text(text: &str) -> String {
        let err = toml::from_str::<toml::Table>(text).unwrap_err();
        describe(text, &err)
    }

    #[test]
    fn a_broken_line_is_named_by_place_and_key_not_quoted() {
        let text =
            "[server]\nlisten = \"0.0.0.0:8080\"\n\n[store]\nurl = \"postgres://gw:hunter2@db/x\" oops\n";
        let described = describe_text(text);
        assert!(described.starts_with("line 5, column "), "{described}");
        assert!(described.contains("(key `store.url`)"), "{described}");
        assert!(!described.contains("hunter2") && !described.contains("oops"), "{described}");
    }

    #[test]
    fn array_tables_are_numbered() {
        let text = "[[providers]]\nname = \"a\"\n[[providers]]\nname = \"b\"\napi_key = sk-secret\n";
        let described = describe_text(text);
        assert!(
            described.contains("line 5") && described.contains("(key `providers[1].api_key`)"),
            "{described}"
        );
        assert!(!described.contains("sk-secret"), "{described}");
    }

    #[test]
    fn quoted_values_in_messages_are_elided() {
        assert_eq!(
            without_quoted_text("invalid type: string \"s3cret\", expected u64"),
            "invalid type: string \"…\", expected u64"
        );
    }
}
