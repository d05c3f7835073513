//! What an embeddings job may ask for, checked at the door like a chat
//! job's messages and parameters: a job stored with an input no provider
//! accepts would use up its key on a certain failure.

use serde_json::{Map, Value};

use super::InvalidParam;

/// OpenAI's embeddings parameters beside `input`.
const EMBEDDING_PARAMS: &[&str] = &["dimensions", "encoding_format", "user"];

/// Checks an embeddings job's `input` (a non-empty string, strings, token
/// ids, or arrays of token ids) and its parameters; paths are relative to
/// the job body (`/input/embed`, `/params/...`) before [`InvalidParam::under`].
pub fn validate_embedding(input: &Value, params: &Map<String, Value>) -> Result<(), InvalidParam> {
    check_input(input).map_err(|reason| InvalidParam { path: String::new(), reason })?;
    for (name, value) in params {
        let fault = match name.as_str() {
            "dimensions" if !value.as_u64().is_some_and(|n| (1..=65_536).contains(&n)) => {
                Some("must be an integer from 1 to 65536")
            }
            "encoding_format" if !matches!(value.as_str(), Some("float" | "base64")) => {
                Some("must be `float` or `base64`")
            }
            "user" if !value.is_string() => Some("must be a string"),
            "stream" => Some("embeddings are not streamed"),
            other if super::params::is_chat_param(other) && !EMBEDDING_PARAMS.contains(&other) => {
                Some("is a chat parameter; an embeddings request does not take it")
            }
            _ => None,
        };
        if let Some(reason) = fault {
            return Err(InvalidParam { path: format!("/{name}"), reason: reason.to_owned() });
        }
    }
    Ok(())
}

fn check_input(input: &Value) -> Result<(), String> {
    let token_ids = |items: &[Value]| !items.is_empty() && items.iter().all(Value::is_u64);
    let one = |item: &Value| match item {
        Value::String(text) => !text.is_empty(),
        Value::Array(ids) => token_ids(ids),
        _ => false,
    };
    let fits = match input {
        Value::String(text) => !text.is_empty(),
        Value::Array(items) if token_ids(items) => true,
        Value::Array(items) => !items.is_empty() && items.len() <= 2048 && items.iter().all(one),
        _ => false,
    };
    match fits {
        true => Ok(()),
        false => Err("must be a non-empty string, an array of up to 2048 non-empty strings, an array of \
                      token ids, or an array of such arrays"
            .to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn verdict(input: Value, params: Value) -> Result<(), String> {
        let params = params.as_object().cloned().unwrap_or_default();
        validate_embedding(&input, &params).map_err(|err| err.path)
    }

    #[test]
    fn inputs_and_parameters_openai_takes_pass() {
        assert_eq!(verdict(json!("hi"), json!({})), Ok(()));
        assert_eq!(verdict(json!(["a", "b"]), json!({"dimensions": 8, "encoding_format": "base64"})), Ok(()));
        assert_eq!(verdict(json!([1, 2]), json!({"user": "u"})), Ok(()));
        assert_eq!(
            verdict(json!([[1], [2, 3]]), json!({"input_type": "query"})),
            Ok(()),
            "vendor fields pass"
        );
    }

    #[test]
    fn the_rest_is_refused_with_its_path() {
        assert_eq!(verdict(json!(""), json!({})), Err(String::new()));
        assert_eq!(verdict(json!([]), json!({})), Err(String::new()));
        assert_eq!(verdict(json!([{"text": "a"}]), json!({})), Err(String::new()));
        assert_eq!(verdict(json!("a"), json!({"dimensions": 0})), Err("/dimensions".into()));
        assert_eq!(verdict(json!("a"), json!({"encoding_format": "hex"})), Err("/encoding_format".into()));
        assert_eq!(verdict(json!("a"), json!({"temperature": 1})), Err("/temperature".into()));
        assert_eq!(verdict(json!("a"), json!({"stream": true})), Err("/stream".into()));
    }
}
