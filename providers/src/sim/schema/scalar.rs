//! Strings and numbers a schema accepts: lengths, formats, bounds and
//! `multipleOf` kept.

use serde_json::{Number, Value};

/// A value for each `format` a client is likely to send, valid by it.
const FORMATS: [(&str, &str); 16] = [
    ("date-time", "2024-01-01T00:00:00Z"),
    ("date", "2024-01-01"),
    ("time", "00:00:00Z"),
    ("duration", "P1D"),
    ("email", "sim@example.com"),
    ("idn-email", "sim@example.com"),
    ("hostname", "example.com"),
    ("idn-hostname", "example.com"),
    ("ipv4", "127.0.0.1"),
    ("ipv6", "::1"),
    ("uri", "https://example.com/"),
    ("uri-reference", "https://example.com/"),
    ("iri", "https://example.com/"),
    ("iri-reference", "https://example.com/"),
    ("url", "https://example.com/"),
    ("uuid", "00000000-0000-4000-8000-000000000000"),
];

/// `text` (or the value of the schema's `format`), padded with `x` to
/// `minLength` and cut to `maxLength` characters.
pub(super) fn string(schema: &Value, text: &str) -> Value {
    let format = schema.get("format").and_then(Value::as_str);
    let formatted = format.and_then(|format| FORMATS.iter().find(|(name, _)| *name == format));
    let mut text: String = formatted.map_or(text, |(_, value)| value).to_owned();
    let least = length(schema, "minLength").unwrap_or(0);
    let chars = text.chars().count();
    if chars < least {
        text.extend(std::iter::repeat_n('x', least - chars));
    }
    if let Some(most) = length(schema, "maxLength") {
        text = text.chars().take(most).collect();
    }
    Value::String(text)
}

fn length(schema: &Value, keyword: &str) -> Option<usize> {
    schema.get(keyword).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok())
}

/// 1, moved into the schema's bounds (an exclusive bound moves it past
/// the bound; between two, to their middle) and up to a `multipleOf`;
/// whole numbers are written as integers.
pub(super) fn number(schema: &Value, integer: bool) -> Value {
    let read = |keyword: &str| schema.get(keyword).and_then(Value::as_f64);
    // Draft 4 writes an exclusive bound as `minimum` plus `exclusiveMinimum: true`.
    let flag = |keyword: &str| schema.get(keyword).and_then(Value::as_bool).unwrap_or(false);
    let (mut low, mut high) = (read("minimum"), read("maximum"));
    let mut low_open = read("exclusiveMinimum").or(low.filter(|_| flag("exclusiveMinimum")));
    let mut high_open = read("exclusiveMaximum").or(high.filter(|_| flag("exclusiveMaximum")));
    if integer {
        // Whole-number bounds, all inclusive.
        low = max(low.map(f64::ceil), low_open.map(|b| b.floor() + 1.0));
        high = min(high.map(f64::floor), high_open.map(|b| b.ceil() - 1.0));
        (low_open, high_open) = (None, None);
    }
    let mut value: f64 = 1.0;
    if let Some(low) = low.filter(|low| value < *low) {
        value = low;
    }
    if let Some(high) = high.filter(|high| value > *high) {
        value = high;
    }
    if let Some(bound) = low_open.filter(|bound| value <= *bound) {
        value = high.or(high_open).map_or(bound + 1.0, |high| (bound + high) / 2.0);
    }
    if let Some(bound) = high_open.filter(|bound| value >= *bound) {
        value = low.or(low_open).map_or(bound - 1.0, |low| (low + bound) / 2.0);
    }
    if let Some(step) = read("multipleOf").filter(|step| *step > 0.0) {
        let up = (value / step).ceil() * step;
        value = if high.is_some_and(|high| up > high) { (value / step).floor() * step } else { up };
    }
    written(value, integer)
}

fn max(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A whole number as a JSON integer (so `integer` validates), any other
/// as a float.
fn written(value: f64, integer: bool) -> Value {
    let whole = value.fract() == 0.0 && value.abs() < 9.0e15;
    if whole || integer {
        return Value::Number(Number::from(value.round() as i64));
    }
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}
