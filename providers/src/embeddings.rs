//! Embeddings, in OpenAI's dialect (`POST {base_url}/embeddings`), the one
//! most embedding servers speak (vLLM, Ollama, TEI, Together…). Anthropic's
//! API has no embeddings, so a provider of that dialect cannot express one.
//!
//! The answer is kept whole, as with chat: only what the gateway must
//! understand is checked (a `data` list of vectors, one per input), so the
//! client gets the provider's own body back, byte for byte on a replay.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::decoded::Decoded;

pub(crate) const PATH: &str = "/embeddings";

/// What an embeddings call sends: OpenAI's request body without `model`
/// (the provider's configured model wins, as for chat).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRequest {
    /// A string, an array of strings, an array of token ids, or an array of
    /// such arrays.
    pub input: Value,
    /// Ignored on the way out: the provider's configured model wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `encoding_format`, `dimensions`, `user` and vendor fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EmbeddingRequest {
    /// How many vectors the answer must hold: one per input.
    pub fn inputs(&self) -> usize {
        match &self.input {
            Value::Array(items) if items.iter().all(|item| !item.is_number()) => items.len(),
            _ => 1,
        }
    }
}

pub(crate) fn request_body(req: &EmbeddingRequest, model: &str) -> Result<Value, serde_json::Error> {
    let mut body = serde_json::to_value(req)?;
    if let Some(object) = body.as_object_mut() {
        object.insert("model".into(), model.into());
    }
    Ok(body)
}

/// The provider's embeddings list, checked to hold one vector per input
/// (floats, or base64 strings when `encoding_format` asked for them).
pub(crate) fn decode_response(body: &[u8], inputs: usize) -> Result<Decoded, String> {
    let list: Value = serde_json::from_slice(body).map_err(|err| format!("not an embeddings list: {err}"))?;
    let data = list.get("data").and_then(Value::as_array).ok_or("no `data` in the embeddings list")?;
    if data.len() != inputs {
        return Err(format!("{} embeddings for {inputs} inputs", data.len()));
    }
    for (index, item) in data.iter().enumerate() {
        let vector_ok = match item.get("embedding") {
            Some(Value::Array(values)) => !values.is_empty() && values.iter().all(Value::is_number),
            Some(Value::String(encoded)) => !encoded.is_empty(),
            _ => false,
        };
        if !vector_ok {
            return Err(format!("data[{index}].embedding is neither numbers nor a base64 string"));
        }
    }
    let usage = list.get("usage").and_then(|usage| {
        let prompt_tokens = usage.get("prompt_tokens").and_then(Value::as_u64)?;
        Some(crate::types::Usage { prompt_tokens, completion_tokens: 0 })
    });
    Ok(Decoded {
        text: String::new(),
        usage,
        finish_reason: None,
        model: list.get("model").and_then(Value::as_str).map(str::to_owned),
        completion: list,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_vector_per_input_is_required() {
        let body = json!({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}],
            "model": "m", "usage": {"prompt_tokens": 3, "total_tokens": 3}});
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let decoded = decode_response(&bytes, 1);
        assert_eq!(decoded.as_ref().ok().and_then(|d| d.usage.map(|u| u.prompt_tokens)), Some(3));
        assert_eq!(decode_response(&bytes, 2).err().as_deref(), Some("1 embeddings for 2 inputs"));
        assert!(decode_response(br#"{"data":[{"embedding":[]}]}"#, 1).is_err());
        assert!(decode_response(br#"{"choices":[]}"#, 1).is_err());
    }

    #[test]
    fn inputs_are_counted_as_openai_reads_them() {
        let count = |input: Value| EmbeddingRequest { input, ..EmbeddingRequest::default() }.inputs();
        assert_eq!(count(json!("one")), 1);
        assert_eq!(count(json!(["a", "b"])), 2);
        assert_eq!(count(json!([1, 2, 3])), 1, "one input as token ids");
        assert_eq!(count(json!([[1, 2], [3]])), 2);
    }
}
