//! The output-shape check: one answer against the route's contract —
//! parses as a JSON object, validates against the schema, keeps the
//! business rules; or, for a prose route, is non-empty prose. An answer
//! that calls tools is judged by its calls instead (`tools.rs`).
//!
//! The contract run calls it on every repeat, and the engine on every
//! attempt of a route with a schema (a violation is a `contract-violation`
//! failure), so the schema is compiled once per checker and the checker is
//! `Send + Sync` to share behind an `Arc`.

use crate::jobs::json_kind;
use serde_json::{Map, Value};

use super::describe::{excerpt, short, type_name};
use super::rules::Rules;
use super::suite::Suite;
use super::tools::{Expect, ToolSet};

/// Why a checker cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route `{route}`: the schema does not compile: {message}")]
pub struct ShapeError {
    pub route: String,
    pub message: String,
}

/// A compiled contract for one route's answers.
#[derive(Debug, Clone)]
pub struct ShapeChecker {
    validator: Option<jsonschema::Validator>,
    rules: Rules,
    expects_json: bool,
    /// The suite's declared tools (compiled when the suite loaded).
    tools: ToolSet,
    /// An embeddings suite's demands, checked instead of the above.
    embeddings: Option<super::EmbeddingContract>,
}

impl ShapeChecker {
    pub fn new(suite: &Suite) -> Result<ShapeChecker, ShapeError> {
        let checker = ShapeChecker::from_parts(suite.route(), suite.schema(), suite.rules())?;
        Ok(ShapeChecker { tools: suite.tools().clone(), embeddings: suite.embeddings().cloned(), ..checker })
    }

    /// A checker from a schema and rules directly.
    pub fn from_parts(
        route: &str,
        schema: Option<&Value>,
        rules: &Rules,
    ) -> Result<ShapeChecker, ShapeError> {
        let validator = schema
            .map(jsonschema::validator_for)
            .transpose()
            .map_err(|err| ShapeError { route: route.to_owned(), message: err.to_string() })?;
        let expects_json = validator.is_some() || rules.constrains_keys();
        Ok(ShapeChecker {
            validator,
            rules: rules.clone(),
            expects_json,
            tools: ToolSet::default(),
            embeddings: None,
        })
    }

    /// What an embeddings suite demands of answers, for an embeddings route.
    pub fn embeddings(&self) -> Option<&super::EmbeddingContract> {
        self.embeddings.as_ref()
    }

    /// True when answers must be JSON objects.
    pub fn expects_json(&self) -> bool {
        self.expects_json
    }

    /// The suite's declared tools; empty when it declares none.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// A whole answer (an OpenAI `chat.completion` and its first choice's
    /// text) against the suite: its tool calls against the declared tools
    /// and `expect`; without calls, its text as [`ShapeChecker::check`]
    /// judges it. Text beside a tool call is a preamble, not the answer,
    /// and is not judged.
    pub fn check_answer(&self, completion: &Value, text: &str, expect: &Expect) -> Result<(), Vec<String>> {
        if self.tools.check(completion, expect)? {
            return Ok(());
        }
        self.check(text).map(drop)
    }

    /// The parsed answer (a JSON object, or the prose as a JSON string),
    /// or every reason it breaks the contract.
    pub fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        if !self.expects_json {
            return self.check_prose(text);
        }
        let value: Value =
            serde_json::from_str(text).map_err(|err| vec![format!("not JSON ({err}): {}", excerpt(text))])?;
        let Value::Object(object) = &value else {
            return Err(vec![format!("a JSON {}, not an object: {}", type_name(&value), excerpt(text))]);
        };
        let mut reasons = Vec::new();
        if let Some(validator) = &self.validator {
            for error in validator.iter_errors(&value) {
                let path = error.instance_path().to_string();
                let at = if path.is_empty() { "/".to_owned() } else { path };
                reasons.push(format!("schema: at {at}: {}", error.masked()));
            }
        }
        self.check_rules(object, &mut reasons);
        if reasons.is_empty() { Ok(value) } else { Err(reasons) }
    }

    fn check_rules(&self, object: &Map<String, Value>, reasons: &mut Vec<String>) {
        let rules = &self.rules;
        if let Some(allowed) = &rules.allowed_keys {
            for key in object.keys().filter(|key| !allowed.contains(*key)) {
                let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
                reasons
                    .push(format!("top-level key `{key}` is not allowed (allowed: {})", allowed.join(", ")));
            }
        }
        for key in rules.required_keys.iter().filter(|key| !object.contains_key(*key)) {
            reasons.push(format!("required key `{key}` is missing"));
        }
        for (key, values) in &rules.enums {
            match object.get(key) {
                None => {}
                Some(Value::String(value)) if values.contains(value) => {}
                Some(value) => {
                    let listed: Vec<&str> = values.iter().map(String::as_str).collect();
                    reasons.push(format!("`{key}` is {}, not one of: {}", short(value), listed.join(", ")));
                }
            }
        }
        for (key, [min, max]) in &rules.string_length {
            match object.get(key) {
                None => {}
                Some(Value::String(value)) => {
                    let chars = value.chars().count();
                    if chars < *min || chars > *max {
                        reasons.push(format!("`{key}` is {chars} characters, allowed {min}..={max}"));
                    }
                }
                Some(value) => reasons.push(format!("`{key}` is {}, not a string", json_kind(value))),
            }
        }
    }

    fn check_prose(&self, text: &str) -> Result<Value, Vec<String>> {
        let trimmed = text.trim();
        let mut reasons = Vec::new();
        if trimmed.is_empty() {
            reasons.push("the answer is empty".to_owned());
        }
        if self.rules.plain_text
            && (trimmed.starts_with('{') || trimmed.starts_with('['))
            && let Ok(value) = serde_json::from_str::<Value>(trimmed)
        {
            reasons.push(format!(
                "a JSON {} where prose was asked for: {}",
                type_name(&value),
                excerpt(text)
            ));
        }
        if let Some([min, max]) = self.rules.text_length {
            let chars = text.chars().count();
            if chars < min || chars > max {
                reasons.push(format!("the answer is {chars} characters, allowed {min}..={max}"));
            }
        }
        if reasons.is_empty() { Ok(Value::String(text.to_owned())) } else { Err(reasons) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checker() -> ShapeChecker {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 50},
                "mood": {"type": "string"},
                "summary": {"type": "string"}
            },
            "required": ["name"]
        });
        let rules: Rules = toml::from_str(
            r#"
            allowed_keys = ["name", "mood", "summary"]
            required_keys = ["name", "summary"]
            enums = { mood = ["calm", "angry"] }
            string_length = { summary = [1, 20] }
            "#,
        )
        .unwrap();
        ShapeChecker::from_parts("extract", Some(&schema), &rules).unwrap()
    }

    fn reasons(text: &str) -> Vec<String> {
        checker().check(text).unwrap_err()
    }

    #[test]
    fn a_good_answer_passes() {
        let value =
            checker().check(r#" {"name": "Ann", "mood": "calm", "summary": "late parcel"} "#).unwrap();
        assert_eq!(value["name"], "Ann");
    }

    #[test]
    fn an_invented_top_level_key_is_named() {
        let found = reasons(r#"{"name": "Ann", "summary": "s", "invented_1a2b": "x"}"#);
        assert_eq!(found, ["top-level key `invented_1a2b` is not allowed (allowed: mood, name, summary)"]);
    }

    #[test]
    fn missing_required_keys_fail_schema_and_rules() {
        let found = reasons(r#"{"mood": "calm"}"#);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("schema: at /:"), "{found:?}");
        assert!(found.contains(&"required key `name` is missing".to_owned()));
        assert!(found.contains(&"required key `summary` is missing".to_owned()));
    }

    #[test]
    fn bad_enum_and_lengths_are_reported() {
        let found = reasons(r#"{"name": "Ann", "mood": "meh", "summary": "far too long for twenty chars"}"#);
        assert_eq!(
            found,
            ["`mood` is `meh`, not one of: angry, calm", "`summary` is 29 characters, allowed 1..=20"]
        );
        let found = reasons(r#"{"name": "Ann", "mood": 3, "summary": ["x"]}"#);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found.contains(&"`mood` is a number, not one of: angry, calm".to_owned()));
        assert!(found.contains(&"`summary` is an array, not a string".to_owned()), "{found:?}");
        let long_name = format!(r#"{{"name": "{}", "summary": "s"}}"#, "n".repeat(60));
        let found = reasons(&long_name);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("schema: at /name:"), "{found:?}");
        assert!(!found[0].contains(&"n".repeat(60)), "values are masked: {found:?}");
    }

    #[test]
    fn prose_and_non_objects_fail() {
        let found = reasons("Sure! Here is my answer, in prose rather than JSON: hello");
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("not JSON ("), "{found:?}");
        assert!(found[0].ends_with("in prose rather than JSON: hello"), "{found:?}");
        assert_eq!(reasons("[1, 2]"), ["a JSON array, not an object: [1, 2]"]);
        assert!(reasons("```json\n{\"name\": \"a\", \"summary\": \"s\"}\n```")[0].starts_with("not JSON"));
        let long = "x".repeat(500);
        assert!(reasons(&long)[0].chars().count() < 200, "excerpts are short");
    }

    #[test]
    fn prose_routes_check_prose() {
        let rules: Rules = toml::from_str("plain_text = true\ntext_length = [1, 30]").unwrap();
        let checker = ShapeChecker::from_parts("chat", None, &rules).unwrap();
        assert!(!checker.expects_json());
        assert_eq!(checker.check("echo: hi {{x}}").unwrap(), json!("echo: hi {{x}}"));
        assert_eq!(checker.check("  ").unwrap_err()[0], "the answer is empty");
        let found = checker.check(r#"{"answer": "echo: hi"}"#).unwrap_err();
        assert_eq!(found, [r#"a JSON object where prose was asked for: {"answer": "echo: hi"}"#]);
        assert_eq!(
            checker.check(&"y".repeat(31)).unwrap_err(),
            ["the answer is 31 characters, allowed 1..=30"]
        );
        assert!(checker.check("{not json, just braces}").is_ok());
        let lenient = ShapeChecker::from_parts("chat", None, &Rules::default()).unwrap();
        assert!(lenient.check(r#"{"answer": 1}"#).is_ok());
        assert!(lenient.check("").is_err());
    }

    #[test]
    fn a_bad_schema_is_an_error() {
        let err = ShapeChecker::from_parts("r", Some(&json!({"type": 5})), &Rules::default()).unwrap_err();
        assert_eq!(err.route, "r");
    }

    #[test]
    fn remote_references_are_refused_offline() {
        let schema = json!({"$ref": "https://schemas.invalid/extract.json"});
        assert!(ShapeChecker::from_parts("r", Some(&schema), &Rules::default()).is_err());
        let known_draft =
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"});
        assert!(ShapeChecker::from_parts("r", Some(&known_draft), &Rules::default()).is_ok());
    }

    #[test]
    fn the_checker_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<ShapeChecker>();
    }
}
