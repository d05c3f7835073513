//! Text from providers, clients and the store, made safe to print.
//!
//! A tool name, an error detail or an idempotency key can hold terminal
//! control sequences (`ESC ] 0 ; … BEL` retitles the window, `ESC [ 2 J`
//! clears it, others have done worse): printed raw, a provider would be
//! writing to the operator's terminal. Every control character is shown
//! escaped instead (`\u{1b}`), so what was sent stays visible.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character (C0, DEL, C1) escaped.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_sequences_are_shown_not_run() {
        let hostile = "\u{1b}]0;PWNED\u{7}\u{1b}[2Jname\u{9b}x";
        assert_eq!(printable(hostile), "\\u{1b}]0;PWNED\\u{7}\\u{1b}[2Jname\\u{9b}x");
        assert!(matches!(printable("plain tool_name ✓"), Cow::Borrowed(_)));
    }
}
