//! The simulator's embeddings: one deterministic unit vector per input, so
//! a test can check that a replay is the same vector and a contract suite
//! can check dimension and norm.

use serde_json::{Value, json};

use super::prompt::fnv1a;

/// Dimensions when the request names none: small, so bodies stay short.
pub(crate) const DEFAULT_DIMENSIONS: usize = 16;

/// The most numbers one answer holds (inputs × dimensions): about 5 MB of
/// JSON. A request for more is refused before anything is built, so a
/// 30 KB request (2,048 short inputs at 4,096 dimensions, 8 Mi numbers)
/// cannot make the simulator build and hold an answer of 180 MB.
pub(crate) const MAX_NUMBERS: usize = 256 * 1024;

/// OpenAI's embeddings list for `body`, or why the request is refused (as
/// the real API refuses it: 400 with the reason).
pub(crate) fn answer(body: &Value, seed: u64) -> Result<Value, String> {
    let inputs = inputs(body.get("input").ok_or("`input` is required")?)?;
    let dimensions = match body.get("dimensions") {
        None | Some(Value::Null) => DEFAULT_DIMENSIONS,
        Some(value) => value
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=4096).contains(n))
            .ok_or("`dimensions` must be an integer from 1 to 4096")?,
    };
    if inputs.len().saturating_mul(dimensions) > MAX_NUMBERS {
        return Err(format!(
            "{} inputs at {dimensions} dimensions make {} numbers; the simulator answers at most {MAX_NUMBERS} \
             (inputs × dimensions)",
            inputs.len(),
            inputs.len().saturating_mul(dimensions)
        ));
    }
    let base64 = match body.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => return Err(format!("`encoding_format` `{other}` is neither float nor base64")),
    };
    let mut tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            tokens += text.split_whitespace().count().max(1);
            let vector = unit_vector(seed, text, dimensions);
            let embedding = if base64 { Value::from(encode_base64(&vector)) } else { json!(vector) };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let model = body.get("model").and_then(Value::as_str).unwrap_or("sim");
    Ok(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
}

/// Each input as text (token ids are written out as numbers).
fn inputs(input: &Value) -> Result<Vec<String>, String> {
    let one = |item: &Value| match item {
        Value::String(text) => Ok(text.clone()),
        Value::Array(ids) if ids.iter().all(Value::is_u64) => Ok(ids.iter().map(Value::to_string).collect()),
        _ => Err("each `input` must be a string or an array of token ids".to_owned()),
    };
    match input {
        Value::Array(items) if !items.is_empty() && !items.iter().all(Value::is_number) => {
            items.iter().map(one).collect()
        }
        Value::Array(items) if items.is_empty() => Err("`input` must not be empty".to_owned()),
        other => Ok(vec![one(other)?]),
    }
}

/// A vector of norm 1 that depends only on the seed, the text and the
/// dimension.
fn unit_vector(seed: u64, text: &str, dimensions: usize) -> Vec<f32> {
    let raw: Vec<f64> = (0..dimensions)
        .map(|i| {
            let hash = fnv1a(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), text.as_bytes());
            (hash % 2001) as f64 / 1000.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
    raw.iter().map(|x| (x / norm) as f32).collect()
}

/// OpenAI's base64 form: the little-endian `f32`s, standard alphabet, padded.
fn encode_base64(vector: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_deterministic_unit_vectors_of_the_asked_dimension() {
        let body = json!({"model": "m", "input": ["a cat", "a dog"], "dimensions": 8});
        let list = answer(&body, 7).unwrap_or_default();
        assert_eq!(list, answer(&body, 7).unwrap_or_default());
        let first: Vec<f64> =
            list["data"][0]["embedding"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
        assert_eq!(first.len(), 8);
        let norm = first.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert_ne!(list["data"][0]["embedding"], list["data"][1]["embedding"]);
        assert_eq!(list["usage"]["prompt_tokens"], 4);
    }

    #[test]
    fn base64_is_the_little_endian_floats() {
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        assert_eq!(encode_base64(&[1.0, 0.0]), "AACAPwAAAAA=");
        let body = json!({"input": "x", "encoding_format": "base64", "dimensions": 3});
        let list = answer(&body, 0).unwrap_or_default();
        assert_eq!(list["data"][0]["embedding"].as_str().map(str::len), Some(16));
    }

    #[test]
    fn bad_inputs_are_refused_with_the_reason() {
        assert!(answer(&json!({}), 0).is_err());
        assert!(answer(&json!({"input": []}), 0).is_err());
        assert!(answer(&json!({"input": [{"a": 1}]}), 0).is_err());
        assert!(answer(&json!({"input": "x", "dimensions": 0}), 0).is_err());
        let flood = json!({"input": vec!["a"; 2048], "dimensions": 4096});
        let refused = answer(&flood, 0).unwrap_err();
        assert!(refused.contains("8388608 numbers"), "refused before anything is built: {refused}");
        assert!(
            answer(&json!({"input": vec!["a"; 64], "dimensions": 4096}), 0).is_ok(),
            "256 Ki numbers fit"
        );
        assert!(answer(&json!({"input": "x", "encoding_format": "hex"}), 0).is_err());
    }
}
