//! Business-shape rules: what a route's answer must look like beyond what
//! its JSON Schema says. A schema checks syntax ("a string"); these say
//! what the product needs ("exactly these keys, this one from this list,
//! at most 400 characters") and are written in the suite so the platform
//! team reads them without knowing JSON Schema.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The `[rules]` table of a suite. Sets and maps are ordered so the
/// serialisation (and so the suite fingerprint) does not depend on the
/// order they were written in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// The exact set of top-level keys an answer may have; unset means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_keys: Option<BTreeSet<String>>,
    /// Top-level keys every answer must have.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub required_keys: BTreeSet<String>,
    /// Top-level keys whose (string) value must be one of the listed ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub enums: BTreeMap<String, BTreeSet<String>>,
    /// Top-level keys whose (string) value must be `[min, max]` characters
    /// long, inclusive. Enforced when the key is present.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_length: BTreeMap<String, [usize; 2]>,
    /// The answer is prose for a person: a JSON document instead means the
    /// provider ignored the format (some wrap every answer in an object).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plain_text: bool,
    /// For prose answers: `[min, max]` characters, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_length: Option<[usize; 2]>,
}

impl Rules {
    /// True when a rule is about the keys of a JSON object, so the answer
    /// must be one.
    pub fn constrains_keys(&self) -> bool {
        self.allowed_keys.is_some()
            || !self.required_keys.is_empty()
            || !self.enums.is_empty()
            || !self.string_length.is_empty()
    }

    /// Rules that contradict each other, as `(key, message)`.
    pub fn inconsistencies(&self, has_schema: bool) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut flag = |key: String, message: String| found.push((format!("rules.{key}"), message));
        if self.plain_text && (has_schema || self.constrains_keys()) {
            flag("plain_text".into(), "a prose answer cannot also have a schema or key rules".into());
        }
        if self.text_length.is_some() && (has_schema || self.constrains_keys()) {
            flag("text_length".into(), "applies to prose answers; this suite expects a JSON object".into());
        }
        if let Some([min, max]) = self.text_length
            && min > max
        {
            flag("text_length".into(), format!("min {min} is greater than max {max}"));
        }
        if let Some(allowed) = &self.allowed_keys {
            if allowed.is_empty() {
                flag("allowed_keys".into(), "is empty: no answer could pass".into());
            }
            let named = self
                .required_keys
                .iter()
                .map(|key| ("required_keys", key))
                .chain(self.enums.keys().map(|key| ("enums", key)))
                .chain(self.string_length.keys().map(|key| ("string_length", key)));
            for (rule, key) in named {
                if !allowed.contains(key) {
                    flag(format!("{rule}.{key}"), "names a key that allowed_keys does not allow".into());
                }
            }
        }
        for (key, values) in &self.enums {
            if values.is_empty() {
                flag(format!("enums.{key}"), "lists no value: no answer could pass".into());
            }
        }
        for (key, [min, max]) in &self.string_length {
            if min > max {
                flag(format!("string_length.{key}"), format!("min {min} is greater than max {max}"));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contradictions_are_named() {
        let rules: Rules = toml::from_str(
            r#"
            allowed_keys = ["a"]
            required_keys = ["b"]
            enums = { a = [] }
            string_length = { a = [5, 1] }
            plain_text = true
            "#,
        )
        .unwrap();
        let keys: Vec<String> = rules.inconsistencies(false).into_iter().map(|(key, _)| key).collect();
        assert_eq!(
            keys,
            ["rules.plain_text", "rules.required_keys.b", "rules.enums.a", "rules.string_length.a"]
        );
        assert!(Rules::default().inconsistencies(true).is_empty());
    }

    #[test]
    fn unknown_rules_are_rejected() {
        assert!(toml::from_str::<Rules>("allowed_key = [\"a\"]").is_err());
    }
}
