//! What an embeddings suite (`[embeddings]` in a suite file) demands of a
//! provider: one vector per input, of the declared dimension, of norm 1
//! when `unit_norm` (what cosine similarity by dot product relies on).
//!
//! The suite's run checks all of it; a live answer is checked for what
//! holds whatever the client asked (a client may ask for fewer
//! `dimensions`): one vector per input, all of one length, unit norm.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `[embeddings]` table of a suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingContract {
    /// The length of every vector when the request names no `dimensions`.
    pub dimensions: u32,
    /// Every vector has norm 1 (within 1e-3).
    #[serde(default = "unit_norm_by_default")]
    pub unit_norm: bool,
}

fn unit_norm_by_default() -> bool {
    true
}

const NORM_TOLERANCE: f64 = 1e-3;

impl EmbeddingContract {
    /// A suite's answer (sent without `dimensions`): the live checks, and
    /// the declared dimension.
    pub fn check_run(&self, list: &Value) -> Result<(), Vec<String>> {
        let lengths = self.check_live(list)?;
        match lengths.first() {
            Some(&length) if length != self.dimensions as usize => {
                Err(vec![format!("vectors of {length} dimensions, the suite declares {}", self.dimensions)])
            }
            _ => Ok(()),
        }
    }

    /// A live answer: every vector non-empty, all of one length, of unit
    /// norm when declared (float vectors; a base64 one is counted only).
    /// `Ok` holds each vector's length.
    pub fn check_live(&self, list: &Value) -> Result<Vec<usize>, Vec<String>> {
        let data = list.get("data").and_then(Value::as_array).filter(|data| !data.is_empty());
        let data = data.ok_or_else(|| vec!["no vectors in `data`".to_owned()])?;
        let mut reasons = Vec::new();
        let mut lengths = Vec::with_capacity(data.len());
        for (index, item) in data.iter().enumerate() {
            match &item["embedding"] {
                Value::Array(values) => {
                    lengths.push(values.len());
                    let norm = values.iter().filter_map(Value::as_f64).map(|x| x * x).sum::<f64>().sqrt();
                    if self.unit_norm && (norm - 1.0).abs() > NORM_TOLERANCE {
                        reasons.push(format!("data[{index}]: norm {norm:.4}, not 1"));
                    }
                }
                // Four bytes per float: padding aside, 4 base64 characters per 3 bytes.
                Value::String(encoded) => {
                    let padding = encoded.bytes().rev().take_while(|b| *b == b'=').count();
                    lengths.push((encoded.len() / 4 * 3).saturating_sub(padding) / 4);
                }
                _ => reasons.push(format!("data[{index}].embedding is not a vector")),
            }
        }
        if lengths.windows(2).any(|pair| pair[0] != pair[1]) {
            reasons.push(format!("vectors of different lengths: {lengths:?}"));
        }
        if reasons.is_empty() { Ok(lengths) } else { Err(reasons) }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CONTRACT: EmbeddingContract = EmbeddingContract { dimensions: 2, unit_norm: true };

    #[test]
    fn the_declared_dimension_and_unit_norm_are_checked() {
        assert_eq!(CONTRACT.check_run(&json!({"data": [{"embedding": [0.6, 0.8]}]})), Ok(()));
        let long = CONTRACT.check_run(&json!({"data": [{"embedding": [0.6, 0.8, 0.0]}]}));
        assert_eq!(long, Err(vec!["vectors of 3 dimensions, the suite declares 2".to_owned()]));
        let unnormed = CONTRACT.check_run(&json!({"data": [{"embedding": [1.0, 1.0]}]}));
        assert!(unnormed.is_err_and(|reasons| reasons[0].contains("norm 1.4142")));
        assert!(CONTRACT.check_run(&json!({"data": []})).is_err());
    }

    #[test]
    fn a_live_answer_may_be_shorter_but_not_ragged() {
        assert_eq!(CONTRACT.check_live(&json!({"data": [{"embedding": [1.0]}]})), Ok(vec![1]));
        assert!(
            CONTRACT.check_live(&json!({"data": [{"embedding": [1.0]}, {"embedding": [0.6, 0.8]}]})).is_err()
        );
        assert_eq!(CONTRACT.check_live(&json!({"data": [{"embedding": "AACAPwAAAAA="}]})), Ok(vec![2]));
    }
}
