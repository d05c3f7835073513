//! Request bodies are read as I-JSON (RFC 7493): a number that an IEEE 754
//! double cannot hold exactly is refused (422, naming its JSON pointer),
//! never rounded.
//!
//! Why refuse rather than keep: the fingerprint is over the RFC 8785 (JCS)
//! canonical form, and RFC 8785 requires I-JSON — it reads every number as
//! a double. A number beyond a double's precision would be rounded there
//! (`9007199254740993` becomes `…992`), stored and sent upstream so, and a
//! later request that really says `…992` under the same key would replay
//! the first job instead of answering 409: two intents merged into one.
//! Refusing at the door keeps the fingerprint, the stored request and what
//! the provider sees the same as what the client sent, and tells the client
//! to send a string (or a smaller number) instead.
//!
//! serde_json (without `arbitrary_precision`) has already rounded a number
//! by the time it is a [`Value`], so the check reads the raw text: a small
//! scan over the body that follows the JSON pointer of each number.

use serde_json::Value;

use super::{Problem, ProblemType};

/// The largest integer a double holds exactly with all below it
/// (RFC 7493 §2.2: 2^53 − 1).
const MAX_SAFE_INTEGER: i128 = (1 << 53) - 1;

/// Parses `bytes` as JSON: 400 `malformed-json` when it is not JSON, 422
/// `invalid-body` when a number is outside what I-JSON can hold.
pub fn parse(bytes: &[u8]) -> Result<Value, Problem> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => match first_inexact_number(bytes) {
            Some(bad) => Err(bad.problem()),
            None => Ok(value),
        },
        // serde_json refuses a number beyond a double's range (`1e400`):
        // that is a number I-JSON cannot hold, said with its path.
        Err(err) => match first_inexact_number(bytes) {
            Some(bad) => Err(bad.problem()),
            None => Err(Problem::new(ProblemType::MalformedJson, format!("the body is not JSON: {err}"))),
        },
    }
}

/// A number the body holds that a double cannot.
#[derive(Debug, PartialEq, Eq)]
struct Inexact {
    /// JSON pointer (RFC 6901) of the number.
    path: String,
    literal: String,
    why: &'static str,
}

impl Inexact {
    fn problem(self) -> Problem {
        let at = if self.path.is_empty() { "the body".to_owned() } else { format!("`{}`", self.path) };
        Problem::new(
            ProblemType::InvalidBody,
            format!(
                "the number {} at {at} {}; numbers must be I-JSON (RFC 7493): integers within \
                 ±(2^53−1) and decimals a double holds exactly. Send it as a string instead",
                self.literal, self.why
            ),
        )
        .titled("Number outside I-JSON")
        .with("path", self.path)
    }
}

/// Where the scan is inside an object or array.
enum Frame {
    Object { key: String, expect_key: bool },
    Array { index: usize },
}

fn pointer(stack: &[Frame]) -> String {
    stack
        .iter()
        .map(|frame| match frame {
            Frame::Object { key, .. } => format!("/{}", key.replace('~', "~0").replace('/', "~1")),
            Frame::Array { index } => format!("/{index}"),
        })
        .collect()
}

/// The first number of the JSON text `bytes` that a double cannot hold
/// exactly. The text need not be valid JSON: the scan only follows
/// brackets, strings and number literals.
fn first_inexact_number(bytes: &[u8]) -> Option<Inexact> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => stack.push(Frame::Object { key: String::new(), expect_key: true }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b':' => {
                if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            b'"' => {
                let end = string_end(bytes, i);
                if let Some(Frame::Object { key, expect_key: true }) = stack.last_mut() {
                    *key = serde_json::from_slice(&bytes[i..end.min(bytes.len())]).unwrap_or_default();
                }
                i = end;
                continue;
            }
            b'-' | b'0'..=b'9' => {
                let end = bytes[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(bytes.len(), |n| i + n);
                let literal = String::from_utf8_lossy(&bytes[i..end]);
                if let Some(why) = inexact(&literal) {
                    return Some(Inexact { path: pointer(&stack), literal: literal.into_owned(), why });
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Index just past the string that starts with the quote at `start`.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut j = start + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'"' => return j + 1,
            _ => j += 1,
        }
    }
    bytes.len()
}

/// Why a double cannot hold the number `literal`, or `None` if it can.
fn inexact(literal: &str) -> Option<&'static str> {
    let Ok(double) = literal.parse::<f64>() else {
        return None; // not a number literal: serde_json says what is wrong
    };
    if !double.is_finite() {
        return Some("is beyond the range of a double");
    }
    if !literal.contains(['.', 'e', 'E']) {
        let fits = literal.parse::<i128>().is_ok_and(|n| n.abs() <= MAX_SAFE_INTEGER);
        return (!fits).then_some("is an integer beyond ±(2^53−1)");
    }
    // A decimal is exact when it is the shortest decimal of the double it
    // reads as: then no other decimal that is exact reads as that double.
    let exact = decimal(literal).is_some_and(|value| Some(value) == decimal(&format!("{double:e}")));
    (!exact).then_some("has more precision than a double holds")
}

/// The value of a decimal literal as (negative, significant digits,
/// exponent), with no leading or trailing zeros; zero is `(false, "", 0)`.
fn decimal(literal: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let (mantissa, exponent) = match rest.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    if trimmed.is_empty() {
        return Some((false, String::new(), 0));
    }
    let exponent = exponent.checked_add(i64::try_from(digits.len() - trimmed.len()).ok()?)?;
    Some((negative, trimmed.to_owned(), exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(text: &str) -> Option<(String, String)> {
        first_inexact_number(text.as_bytes()).map(|bad| (bad.path, bad.literal))
    }

    #[test]
    fn exact_numbers_pass() {
        for text in [
            "9007199254740991",
            "-9007199254740991",
            "0.1",
            "-0",
            "1.50",
            "1e300",
            "2.5E-3",
            "9007199254740994.0",
            "0.000",
            r#"{"a": [1, 2.5, {"b": 3}], "c": "9007199254740993"}"#,
        ] {
            assert_eq!(bad(text), None, "{text}");
        }
    }

    #[test]
    fn inexact_numbers_are_found_with_their_pointer() {
        assert_eq!(bad("9007199254740993"), Some((String::new(), "9007199254740993".into())));
        assert_eq!(bad("-9007199254740992"), Some((String::new(), "-9007199254740992".into())));
        let nested = r#"{"a": {"x,y": "}", "b/c": [0, 1, 9007199254740993.0]}}"#;
        assert_eq!(bad(nested), Some(("/a/b~1c/2".into(), "9007199254740993.0".into())));
        assert_eq!(
            bad(r#"{"p": 0.10000000000000000001}"#),
            Some(("/p".into(), "0.10000000000000000001".into()))
        );
        assert_eq!(bad(r#"{"p": 1e400}"#), Some(("/p".into(), "1e400".into())));
    }

    #[test]
    fn parse_refuses_with_422_and_a_path() {
        let problem =
            parse(br#"{"params": {"seed": 9007199254740993}}"#).err().map(|p| (p.status(), p.slug()));
        assert_eq!(problem, Some((axum::http::StatusCode::UNPROCESSABLE_ENTITY, "invalid-body")));
        let problem = parse(br#"{"x": 1e400}"#).err().map(|p| p.slug());
        assert_eq!(problem, Some("invalid-body"));
        assert_eq!(parse(b"{nope").err().map(|p| p.slug()), Some("malformed-json"));
    }
}
