//! Values built from a JSON Schema, so what the simulator answers — a tool
//! call's arguments, a structured output — is something a client's
//! validator accepts, whatever schema the client sent: objects and their
//! `required` properties, arrays and their `items`, `enum` and `const`,
//! `anyOf` / `oneOf` / `allOf`, `$ref` into `$defs` (recursion included),
//! nullable types, number bounds, string lengths and common formats.
//!
//! Deterministic: the same schema and text give the same value. Strings
//! carry the text the simulator was given (the prompt), so an answer still
//! says something about the request.

mod scalar;

use serde_json::{Map, Value};

/// How deep nested schemas are filled completely; deeper, only what a
/// schema requires is filled and a nullable or empty choice is preferred,
/// so a recursive schema (a tree of `$ref`s to itself) ends.
const FULL_DEPTH: usize = 6;

/// How many `$ref`s in a row are followed before giving up on a cycle.
const MAX_REFS: usize = 32;

/// The schema that accepts anything: what an unresolvable `$ref` stands for.
static ANYTHING: Value = Value::Bool(true);

/// What kind of value a schema asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
    Null,
}

/// A value `schema` accepts, its strings made of `text` (`x` when empty).
pub(crate) fn example(schema: &Value, text: &str) -> Value {
    let text = if text.is_empty() { "x" } else { text };
    Builder { root: schema, text }.build(schema, 0)
}

/// `schema` with its `$ref`s followed (against `root`), so a caller can
/// read the keywords of the schema it stands for.
pub(crate) fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..MAX_REFS {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else { return schema };
        // A local JSON pointer: `#/$defs/Name`, or `#` for the root.
        match reference.strip_prefix('#').and_then(|pointer| root.pointer(pointer)) {
            Some(target) => schema = target,
            None => return &ANYTHING,
        }
    }
    &ANYTHING
}

/// The kind a schema asks for: its `type` (the first that is not `null`
/// when it lists several, so a nullable field gets a real value), else
/// what its keywords imply, else a string.
pub(crate) fn kind(schema: &Value) -> Kind {
    let named = match schema.get("type") {
        Some(Value::String(kind)) => Some(kind.as_str()),
        Some(Value::Array(kinds)) => {
            let kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
            kinds.iter().find(|k| !k.eq_ignore_ascii_case("null")).or(kinds.first()).copied()
        }
        _ => None,
    };
    if let Some(kind) = named.and_then(kind_named) {
        return kind;
    }
    let has = |keys: &[&str]| keys.iter().any(|key| schema.get(*key).is_some());
    if has(&["properties", "required", "additionalProperties", "minProperties", "patternProperties"]) {
        Kind::Object
    } else if has(&["items", "prefixItems", "minItems", "maxItems"]) {
        Kind::Array
    } else if has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]) {
        Kind::Number
    } else {
        Kind::String
    }
}

fn kind_named(name: &str) -> Option<Kind> {
    let kinds = [
        ("object", Kind::Object),
        ("array", Kind::Array),
        ("string", Kind::String),
        ("integer", Kind::Integer),
        ("number", Kind::Number),
        ("boolean", Kind::Boolean),
        ("null", Kind::Null),
    ];
    kinds.into_iter().find(|(known, _)| name.eq_ignore_ascii_case(known)).map(|(_, kind)| kind)
}

/// Builds values against one root schema (where `$ref`s point).
struct Builder<'a> {
    root: &'a Value,
    text: &'a str,
}

impl Builder<'_> {
    fn build(&self, schema: &Value, depth: usize) -> Value {
        let schema = resolve(self.root, schema);
        let schema = match schema {
            Value::Object(_) => schema,
            Value::Bool(false) => return Value::Null,
            _ => return Value::String(self.text.to_owned()),
        };
        if let Some(constant) = schema.get("const") {
            return constant.clone();
        }
        if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
            return first.clone();
        }
        for choices in ["anyOf", "oneOf"] {
            if let Some(choices) = schema.get(choices).and_then(Value::as_array).filter(|c| !c.is_empty()) {
                return self.build(self.choose(choices, depth), depth + 1);
            }
        }
        if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
            return self.build(&self.merged(schema, parts), depth + 1);
        }
        match kind(schema) {
            Kind::Object => self.object(schema, depth),
            Kind::Array => self.array(schema, depth),
            Kind::String => scalar::string(schema, self.text),
            Kind::Integer => scalar::number(schema, true),
            Kind::Number => scalar::number(schema, false),
            Kind::Boolean => Value::Bool(true),
            Kind::Null => Value::Null,
        }
    }

    /// The choice to build: the first that is not `null` — or, deep in a
    /// recursive schema, the first that is, so the value ends.
    fn choose<'s>(&self, choices: &'s [Value], depth: usize) -> &'s Value {
        let is_null = |choice: &Value| kind(resolve(self.root, choice)) == Kind::Null;
        let wanted = |choice: &&Value| is_null(choice) == (depth >= FULL_DEPTH);
        choices.iter().find(wanted).unwrap_or(&choices[0])
    }

    /// `allOf`'s parts as one schema: their keywords side by side, their
    /// `properties` and `required` joined.
    fn merged(&self, schema: &Value, parts: &[Value]) -> Value {
        let mut merged = Map::new();
        let mut properties = Map::new();
        let mut required: Vec<Value> = Vec::new();
        let outer = schema.as_object().into_iter().flatten().filter(|(key, _)| key.as_str() != "allOf");
        let inner = parts.iter().filter_map(|part| resolve(self.root, part).as_object()).flatten();
        for (key, value) in outer.chain(inner) {
            match (key.as_str(), value) {
                ("properties", Value::Object(more)) => properties.extend(more.clone()),
                ("required", Value::Array(more)) => required.extend(more.iter().cloned()),
                _ => {
                    merged.insert(key.clone(), value.clone());
                }
            }
        }
        if !properties.is_empty() {
            merged.insert("properties".into(), Value::Object(properties));
        }
        if !required.is_empty() {
            merged.insert("required".into(), Value::Array(required));
        }
        Value::Object(merged)
    }

    /// Every property (deep down, the required ones only), each required
    /// key the properties do not describe, and as many more keys as
    /// `minProperties` asks when the schema allows them.
    fn object(&self, schema: &Value, depth: usize) -> Value {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let extra = schema.get("additionalProperties").unwrap_or(&ANYTHING);
        let mut object = Map::new();
        for (key, property) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
            if depth < FULL_DEPTH || required.contains(&key.as_str()) {
                object.insert(key.clone(), self.build(property, depth + 1));
            }
        }
        for key in required {
            if !object.contains_key(key) {
                object.insert(key.to_owned(), self.build(extra, depth + 1));
            }
        }
        let wanted = schema.get("minProperties").and_then(Value::as_u64).unwrap_or(0);
        let mut next = 1;
        while (object.len() as u64) < wanted && *extra != Value::Bool(false) {
            object.entry(format!("key_{next}")).or_insert_with(|| self.build(extra, depth + 1));
            next += 1;
        }
        Value::Object(object)
    }

    /// One item, or as many as `minItems` asks (none past `maxItems`;
    /// deep down, only the ones asked for); tuple positions
    /// (`prefixItems`, or `items` as an array) each from their own schema.
    /// Items after the first get their own text, so `uniqueItems` holds
    /// for strings.
    fn array(&self, schema: &Value, depth: usize) -> Value {
        let least = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let most = schema.get("maxItems").and_then(Value::as_u64).unwrap_or(u64::MAX);
        let count = if depth < FULL_DEPTH { least.max(1) } else { least }.min(most);
        let (tuple, rest) = match (schema.get("prefixItems"), schema.get("items")) {
            (Some(Value::Array(tuple)), items) => (tuple.as_slice(), items),
            (None, Some(Value::Array(tuple))) => (tuple.as_slice(), schema.get("additionalItems")),
            (_, items) => (&[][..], items),
        };
        (0..count)
            .map(|i| {
                let index = usize::try_from(i).unwrap_or(usize::MAX);
                let item = tuple.get(index).or(rest).unwrap_or(&ANYTHING);
                let text = if i == 0 { self.text.to_owned() } else { format!("{} {}", self.text, i + 1) };
                Builder { root: self.root, text: &text }.build(item, depth + 1)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
