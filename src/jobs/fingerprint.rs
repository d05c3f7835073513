use sha2::{Digest, Sha256};

/// The exact intent an idempotency key is bound to (R3): SHA-256 over the
/// RFC 8785 (JCS) canonical form of the request body, so key order, whitespace
/// and number spelling do not change it, while any change of meaning does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn of_canonical(canonical_json: &str) -> Self {
        Fingerprint(sha256_hex(canonical_json.as_bytes()))
    }

    /// Wraps a fingerprint read back from storage.
    pub fn from_stored(hex: String) -> Self {
        Fingerprint(hex)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// RFC 8785 canonical form of a JSON value, or of what a typed value
/// serializes to (written straight from the type, no `Value` between).
pub fn canonical_json<T: serde::Serialize>(value: &T) -> Result<String, serde_json::Error> {
    serde_json_canonicalizer::to_string(value)
}

/// SHA-256 in lower-case hex, as `sha256sum` prints it.
pub fn sha256_hex(data: &[u8]) -> String {
    // Two table lookups a byte: every request hashes its body and its key,
    // and `write!("{:02x}")` cost more than the hash itself (a formatter
    // per byte).
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(data);
    let mut out = String::with_capacity(64);
    for byte in digest.iter() {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_fingerprint() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str("{\"a\":[1,2],\n  \"b\":1.0}").unwrap();
        let fa = Fingerprint::of_canonical(&canonical_json(&a).unwrap());
        let fb = Fingerprint::of_canonical(&canonical_json(&b).unwrap());
        assert_eq!(fa, fb);
    }

    #[test]
    fn a_different_value_changes_the_fingerprint() {
        let a = canonical_json(&json!({"a": [1, 2]})).unwrap();
        let b = canonical_json(&json!({"a": [2, 1]})).unwrap();
        assert_ne!(Fingerprint::of_canonical(&a), Fingerprint::of_canonical(&b));
    }

    #[test]
    fn hex_is_sha256sum_format() {
        assert_eq!(
            Fingerprint::of_canonical("").as_str(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
