//! The provider side of a record's key. A contract record proves how one
//! provider configuration behaved; pointing the same name at another model,
//! endpoint or tokenizer is a different provider, so its record goes stale.

use serde_json::json;

use crate::jobs::{canonical_json, sha256_hex};

/// SHA-256 hex over the canonical JSON of what decides a provider's
/// behaviour under a suite. Timeouts, headers and the API key are left out:
/// they change whether a call gets through, not what the answer looks like.
pub fn provider_fingerprint(dialect: &str, base_url: &str, model: &str, tokenizer: Option<&str>) -> String {
    let input = json!({
        "version": 1,
        "dialect": dialect,
        "base_url": base_url.trim_end_matches('/'),
        "model": model,
        "tokenizer": tokenizer,
    });
    // Canonicalising strings and nulls cannot fail; the fallback keeps the
    // function total without a panic path.
    let canonical = canonical_json(&input).unwrap_or_else(|_| input.to_string());
    sha256_hex(canonical.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_counts() {
        let base = provider_fingerprint("openai", "http://a/v1", "m", Some("o200k_base"));
        assert_eq!(base.len(), 64);
        assert_eq!(base, provider_fingerprint("openai", "http://a/v1/", "m", Some("o200k_base")));
        for other in [
            provider_fingerprint("anthropic", "http://a/v1", "m", Some("o200k_base")),
            provider_fingerprint("openai", "http://b/v1", "m", Some("o200k_base")),
            provider_fingerprint("openai", "http://a/v1", "m2", Some("o200k_base")),
            provider_fingerprint("openai", "http://a/v1", "m", Some("cl100k_base")),
            provider_fingerprint("openai", "http://a/v1", "m", None),
        ] {
            assert_ne!(other, base);
        }
    }
}
