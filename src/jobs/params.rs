//! The generation parameters a job carries, checked at the door.
//!
//! A parameter of the wrong type or out of range would be stored, bind its
//! idempotency key, and then fail the job when its provider request is
//! built (or be refused by the provider, after an attempt was paid for).
//! The parameters OpenAI's chat schema defines are checked here, before
//! anything is stored; vendor fields (`top_k`, `chat_template_kwargs`…)
//! pass through unchecked, as the provider's to judge.

use serde_json::{Map, Value};

/// Why a parameter was refused, and where (a JSON pointer relative to the
/// parameters object, e.g. `/temperature`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` {reason}")]
pub struct InvalidParam {
    pub path: String,
    pub reason: String,
}

impl InvalidParam {
    /// The same refusal with `prefix` (where the parameters sit in the body
    /// the caller sent: `/params` in a job, empty in a chat completion).
    pub fn under(mut self, prefix: &str) -> Self {
        self.path = format!("{prefix}{}", self.path);
        self
    }
}

/// What a known parameter must be.
#[derive(Clone, Copy)]
enum Expect {
    /// An integer in the range.
    Integer(i64, i64),
    /// A number in the range.
    Number(f64, f64),
    Bool,
    String,
    Object,
    Array,
    /// A string or an array of strings (`stop`).
    StringOrStrings,
    /// A string or an object (`tool_choice`).
    StringOrObject,
}

/// OpenAI's chat parameters and what each must be.
const KNOWN: &[(&str, Expect)] = &[
    ("max_tokens", Expect::Integer(1, u32::MAX as i64)),
    ("max_completion_tokens", Expect::Integer(1, u32::MAX as i64)),
    ("n", Expect::Integer(1, 128)),
    ("temperature", Expect::Number(0.0, 2.0)),
    ("top_p", Expect::Number(0.0, 1.0)),
    ("presence_penalty", Expect::Number(-2.0, 2.0)),
    ("frequency_penalty", Expect::Number(-2.0, 2.0)),
    ("seed", Expect::Integer(i64::MIN, i64::MAX)),
    ("top_logprobs", Expect::Integer(0, 20)),
    ("logprobs", Expect::Bool),
    ("stream", Expect::Bool),
    ("parallel_tool_calls", Expect::Bool),
    ("store", Expect::Bool),
    ("user", Expect::String),
    ("stop", Expect::StringOrStrings),
    ("tool_choice", Expect::StringOrObject),
    ("tools", Expect::Array),
    ("functions", Expect::Array),
    ("response_format", Expect::Object),
    ("stream_options", Expect::Object),
    ("logit_bias", Expect::Object),
    ("metadata", Expect::Object),
];

/// Whether `name` is one of OpenAI's chat parameters.
pub(super) fn is_chat_param(name: &str) -> bool {
    KNOWN.iter().any(|(known, _)| *known == name)
}

/// Checks every known parameter in `params`; the first fault wins. Two
/// completion limits that disagree are refused too: the dialects read
/// different ones, and a budget must reserve the one that is sent.
pub fn validate_params(params: &Map<String, Value>) -> Result<(), InvalidParam> {
    for (name, expect) in KNOWN {
        if let Some(value) = params.get(*name) {
            check(value, *expect).map_err(|reason| InvalidParam { path: format!("/{name}"), reason })?;
        }
    }
    let limits = (params.get("max_tokens"), params.get("max_completion_tokens"));
    if let (Some(a), Some(b)) = limits
        && a != b
    {
        return Err(InvalidParam {
            path: "/max_completion_tokens".into(),
            reason: "differs from `max_tokens`: set one completion limit (or both to the same value)".into(),
        });
    }
    Ok(())
}

fn check(value: &Value, expect: Expect) -> Result<(), String> {
    let fits = match expect {
        Expect::Integer(low, high) => value.as_i64().is_some_and(|v| (low..=high).contains(&v)),
        Expect::Number(low, high) => value.as_f64().is_some_and(|v| (low..=high).contains(&v)),
        Expect::Bool => value.is_boolean(),
        Expect::String => value.is_string(),
        Expect::Object => value.is_object(),
        Expect::Array => value.is_array(),
        Expect::StringOrStrings => {
            value.is_string() || value.as_array().is_some_and(|items| items.iter().all(Value::is_string))
        }
        Expect::StringOrObject => value.is_string() || value.is_object(),
    };
    if fits {
        return Ok(());
    }
    let wanted = match expect {
        Expect::Integer(low, high) if high == i64::MAX => format!("must be an integer of at least {low}"),
        Expect::Integer(low, high) if low == i64::MIN => format!("must be an integer of at most {high}"),
        Expect::Integer(low, high) => format!("must be an integer from {low} to {high}"),
        Expect::Number(low, high) => format!("must be a number from {low} to {high}"),
        Expect::Bool => "must be true or false".into(),
        Expect::String => "must be a string".into(),
        Expect::Object => "must be an object".into(),
        Expect::Array => "must be an array".into(),
        Expect::StringOrStrings => "must be a string or an array of strings".into(),
        Expect::StringOrObject => "must be a string or an object".into(),
    };
    // A number out of its range is named by its value, not its kind.
    match (expect, value) {
        (Expect::Integer(..) | Expect::Number(..), Value::Number(n)) => Err(format!("{wanted}, not {n}")),
        _ => Err(format!("{wanted}, not {}", super::json_kind(value))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_number_out_of_range_is_named_by_its_value() {
        let err =
            validate_params(&params(json!({"temperature": 3}))).err().map(|e| e.reason).unwrap_or_default();
        assert_eq!(err, "must be a number from 0 to 2, not 3");
        let err = validate_params(&params(json!({"temperature": "hot"})))
            .err()
            .map(|e| e.reason)
            .unwrap_or_default();
        assert_eq!(err, "must be a number from 0 to 2, not a string");
    }

    #[test]
    fn wrong_types_and_ranges_are_refused_with_their_path() {
        for (body, path) in [
            (json!({"max_tokens": -1}), "/max_tokens"),
            (json!({"max_tokens": 1.5}), "/max_tokens"),
            (json!({"temperature": "hot"}), "/temperature"),
            (json!({"temperature": 3}), "/temperature"),
            (json!({"n": 0}), "/n"),
            (json!({"stop": [1]}), "/stop"),
            (json!({"tools": {}}), "/tools"),
            (json!({"stream": "yes"}), "/stream"),
            (json!({"max_completion_tokens": 1, "max_tokens": 100000}), "/max_completion_tokens"),
        ] {
            let err = validate_params(&params(body.clone())).expect_err(&body.to_string());
            assert_eq!(err.path, path, "{body}: {err}");
        }
    }

    #[test]
    fn valid_and_vendor_parameters_pass() {
        let body = json!({"max_tokens": 8, "max_completion_tokens": 8, "temperature": 0, "top_p": 1,
            "stop": "END", "tool_choice": "auto", "seed": -5, "top_k": "anything", "stream": true});
        assert_eq!(validate_params(&params(body)), Ok(()));
    }
}
