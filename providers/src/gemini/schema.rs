//! A JSON Schema (a tool's `parameters`, a `json_schema` response format)
//! as Gemini's `Schema`: the OpenAPI 3.0 subset its `responseSchema` and
//! `functionDeclarations[].parameters` take. Gemini refuses a request
//! whose schema carries a keyword it does not know (`Unknown name
//! "additionalProperties"`), so the schema is rewritten rather than passed.
//!
//! Three kinds of keyword:
//! - kept: what the subset has (`properties`, `items`, `required`, `enum`,
//!   bounds, `description`…); `type` is written as Gemini writes it
//!   (`OBJECT`), a `["string", "null"]` type as `STRING` plus `nullable`,
//!   `const` as a one-value `enum`, `oneOf` as `anyOf`, and local `$ref`s
//!   (`#/$defs/…`, `#/definitions/…`, as Pydantic writes them) inlined;
//! - dropped: validation Gemini has no room for (`additionalProperties`,
//!   `uniqueItems`, `exclusiveMinimum`, `$schema`…). Gemini is told a
//!   looser schema, and the route's shape check still holds the answer to
//!   the whole one (docs/gemini.md);
//! - refused: keywords that change what the schema means (`not`, `if`,
//!   `patternProperties`, `prefixItems`, a recursive `$ref`…): the request
//!   cannot be expressed, and is never sent with them dropped.

use serde_json::{Map, Value};

use super::untranslatable::Untranslatable;

/// Keywords Gemini's `Schema` has, carried as they are.
const KEPT: [&str; 18] = [
    "description",
    "title",
    "format",
    "nullable",
    "enum",
    "required",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minProperties",
    "maxProperties",
    "default",
    "example",
    "propertyOrdering",
];

/// Keywords that mean something Gemini's `Schema` cannot say.
const REFUSED: [&str; 11] = [
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
];

/// How deep `$ref`s may nest before the schema is taken for recursive.
const MAX_DEPTH: usize = 32;

/// `schema` as Gemini's `Schema`. `at` names where it is, for the reason.
pub(super) fn to_gemini(schema: &Value, at: &str) -> Result<Value, Untranslatable> {
    Translation { root: schema }.schema(schema, at, 0)
}

struct Translation<'a> {
    /// The whole schema, which local `$ref`s point into.
    root: &'a Value,
}

impl Translation<'_> {
    fn schema(&self, schema: &Value, at: &str, depth: usize) -> Result<Value, Untranslatable> {
        let refuse = |why: String| Untranslatable::Schema { at: at.to_owned(), why };
        if depth > MAX_DEPTH {
            return Err(refuse("its `$ref`s nest too deep (a recursive schema)".into()));
        }
        let Some(object) = schema.as_object() else {
            return Err(refuse("a schema must be an object here".into()));
        };
        if let Some(reference) = object.get("$ref") {
            return self.schema(self.resolve(reference).map_err(refuse)?, at, depth + 1);
        }
        if let Some(keyword) = REFUSED.iter().find(|k| object.contains_key(**k)) {
            return Err(refuse(format!("`{keyword}` has no equivalent in Gemini's schema")));
        }
        let mut out = Map::new();
        if let Some(kind) = object.get("type") {
            self.kind(kind, &mut out).map_err(refuse)?;
        }
        for (keyword, value) in object {
            match keyword.as_str() {
                "properties" => {
                    let mut properties = Map::new();
                    for (name, property) in value.as_object().into_iter().flatten() {
                        let inner = self.schema(property, &format!("{at}.properties.{name}"), depth + 1)?;
                        properties.insert(name.clone(), inner);
                    }
                    out.insert("properties".into(), Value::Object(properties));
                }
                "items" => {
                    out.insert("items".into(), self.schema(value, &format!("{at}.items"), depth + 1)?);
                }
                "anyOf" | "oneOf" => {
                    let list = self.list(value, &format!("{at}.{keyword}"), depth)?;
                    out.insert("anyOf".into(), Value::Array(list));
                }
                "const" => {
                    out.insert("enum".into(), Value::Array(vec![value.clone()]));
                }
                kept if KEPT.contains(&kept) => {
                    out.entry(kept.to_owned()).or_insert_with(|| value.clone());
                }
                _ => {} // `type` (above), `allOf` (below), what Gemini has no room for
            }
        }
        if let Some(all_of) = object.get("allOf") {
            self.all_of(all_of, at, depth, &mut out)?;
        }
        // Gemini takes an enum as a string's: say so when the schema did not.
        let strings =
            out.get("enum").and_then(Value::as_array).is_some_and(|e| e.iter().all(Value::is_string));
        if strings && !out.contains_key("type") {
            out.insert("type".into(), "STRING".into());
        }
        Ok(Value::Object(out))
    }

    /// `type` as Gemini writes it: upper case, one type, `nullable` for null.
    fn kind(&self, kind: &Value, out: &mut Map<String, Value>) -> Result<(), String> {
        let kinds: Vec<&str> = match kind {
            Value::String(kind) => vec![kind.as_str()],
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => return Err("`type` is neither a name nor a list of names".into()),
        };
        let (nulls, named): (Vec<&str>, Vec<&str>) = kinds.into_iter().partition(|k| *k == "null");
        match named.as_slice() {
            [] => {
                out.insert("type".into(), "NULL".into());
            }
            [one] => {
                out.insert("type".into(), one.to_ascii_uppercase().into());
                if !nulls.is_empty() {
                    out.insert("nullable".into(), true.into());
                }
            }
            many => return Err(format!("`type` names {} types; Gemini's schema takes one", many.len())),
        }
        Ok(())
    }

    /// `anyOf`/`oneOf`: each alternative translated.
    fn list(&self, value: &Value, at: &str, depth: usize) -> Result<Vec<Value>, Untranslatable> {
        let Some(items) = value.as_array() else {
            return Err(Untranslatable::Schema { at: at.to_owned(), why: "is not a list of schemas".into() });
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.schema(item, &format!("{at}[{i}]"), depth + 1))
            .collect()
    }

    /// `allOf` of one schema (Pydantic's way of describing a `$ref`) is
    /// that schema, under the keywords beside it; of more, it cannot be said.
    fn all_of(
        &self,
        value: &Value,
        at: &str,
        depth: usize,
        out: &mut Map<String, Value>,
    ) -> Result<(), Untranslatable> {
        match value.as_array().map(Vec::as_slice) {
            Some([one]) => {
                let inner = self.schema(one, &format!("{at}.allOf[0]"), depth + 1)?;
                for (keyword, value) in inner.as_object().into_iter().flatten() {
                    out.entry(keyword.clone()).or_insert_with(|| value.clone());
                }
                Ok(())
            }
            _ => Err(Untranslatable::Schema {
                at: at.to_owned(),
                why: "`allOf` of several schemas has no equivalent in Gemini's schema".into(),
            }),
        }
    }

    /// A local `$ref` (`#/$defs/Name`, `#/definitions/Name`) in the root.
    fn resolve(&self, reference: &Value) -> Result<&Value, String> {
        let pointer = reference
            .as_str()
            .and_then(|r| r.strip_prefix('#'))
            .ok_or_else(|| format!("`$ref` {reference} is not a reference into this schema"))?;
        self.root.pointer(pointer).ok_or_else(|| format!("`$ref` {reference} points at nothing"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_json_schema_becomes_gemini_schema() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "additionalProperties": false, "required": ["city", "unit"],
            "properties": {
                "city": {"type": "string", "description": "a city", "minLength": 1},
                "unit": {"enum": ["c", "f"]},
                "days": {"type": ["integer", "null"], "exclusiveMinimum": 0},
                "kind": {"const": "forecast"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "at": {"$ref": "#/$defs/Place"},
                "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "wrapped": {"allOf": [{"$ref": "#/$defs/Place"}], "description": "where"}
            },
            "$defs": {"Place": {"type": "object", "properties": {"lat": {"type": "number"}}}}
        });
        let place = json!({"type": "OBJECT", "properties": {"lat": {"type": "NUMBER"}}});
        assert_eq!(
            to_gemini(&schema, "schema").ok(),
            Some(json!({
                "type": "OBJECT", "required": ["city", "unit"],
                "properties": {
                    "city": {"type": "STRING", "description": "a city", "minLength": 1},
                    "unit": {"type": "STRING", "enum": ["c", "f"]},
                    "days": {"type": "INTEGER", "nullable": true},
                    "kind": {"type": "STRING", "enum": ["forecast"]},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
                    "at": place,
                    "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                    "wrapped": {"type": "OBJECT", "properties": {"lat": {"type": "NUMBER"}}, "description": "where"}
                }
            }))
        );
    }

    #[test]
    fn what_would_change_the_meaning_is_refused() {
        let cases = [
            (
                json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}),
                "schema.properties.a",
            ),
            (json!({"type": ["string", "number"]}), "2 types"),
            (
                json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"properties": {"next": {"$ref": "#/$defs/Node"}}}}}),
                "recursive",
            ),
            (json!({"$ref": "https://example.com/s.json"}), "not a reference into this schema"),
            (json!({"allOf": [{"type": "object"}, {"required": ["a"]}]}), "allOf"),
        ];
        for (schema, why) in cases {
            let reason = to_gemini(&schema, "schema").err().map(|e| e.to_string()).unwrap_or_default();
            assert!(reason.contains(why), "{schema}: {reason}");
        }
    }
}
