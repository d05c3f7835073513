//! The provider side of a record's key. A contract record proves how one
//! provider configuration behaved; pointing the same name at another model,
//! endpoint or tokenizer is a different provider, so its record goes stale.

use serde_json::{Map, Value, json};

use crate::jobs::{canonical_json, sha256_hex};

/// SHA-256 hex over the canonical JSON of what decides a provider's
/// behaviour under a suite. Timeouts, headers and the API key are left out:
/// they change whether a call gets through, not what the answer looks like.
pub fn provider_fingerprint(dialect: &str, base_url: &str, model: &str, tokenizer: Option<&str>) -> String {
    provider_fingerprint_with(dialect, base_url, model, tokenizer, &Map::new())
}

/// [`provider_fingerprint`] plus the provider's `options` that change what
/// it is sent or how its prompts are checked: request overrides, the
/// temperature cap, a remote tokenizer's endpoints. They join the hashed
/// input only when there are any, so a provider without them keeps the
/// fingerprint (and the records) it had before options existed.
pub fn provider_fingerprint_with(
    dialect: &str,
    base_url: &str,
    model: &str,
    tokenizer: Option<&str>,
    options: &Map<String, Value>,
) -> String {
    let mut input = json!({
        "version": 1,
        "dialect": dialect,
        "base_url": base_url.trim_end_matches('/'),
        "model": model,
        "tokenizer": tokenizer,
    });
    if let (Some(object), false) = (input.as_object_mut(), options.is_empty()) {
        object.insert("options".into(), Value::Object(options.clone()));
    }
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

    #[test]
    fn options_count_and_no_options_changes_nothing() {
        let base = provider_fingerprint("openai", "http://a/v1", "m", Some("remote"));
        let with = |options: Value| {
            provider_fingerprint_with(
                "openai",
                "http://a/v1",
                "m",
                Some("remote"),
                options.as_object().unwrap(),
            )
        };
        assert_eq!(with(json!({})), base, "records made before options existed stay current");
        let json_object = with(json!({"request": {"response_format": {"type": "json_object"}}}));
        assert_ne!(json_object, base);
        assert_ne!(with(json!({"request": {"response_format": {"type": "text"}}})), json_object);
        assert_ne!(with(json!({"max_temperature": 0.2})), base);
        assert_eq!(
            with(json!({"request": {"temperature": 0, "seed": 1}})),
            with(json!({"request": {"seed": 1, "temperature": 0}})),
            "key order does not matter"
        );
    }
}
