use serde_json::{Value, json};

use super::example;

/// The value built for `schema`, after checking that the schema accepts
/// it (formats asserted too) and that building it again gives the same.
fn valid_example(schema: &Value, text: &str) -> Value {
    let value = example(schema, text);
    let validator = jsonschema::options().should_validate_formats(true).build(schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{value} fails {schema}: {errors:?}");
    assert_eq!(example(schema, text), value, "deterministic");
    value
}

#[test]
fn a_tool_schema_gets_every_property_of_its_type() {
    let schema = json!({"type": "object", "additionalProperties": false, "required": ["city"],
        "properties": {"city": {"type": "string", "minLength": 1}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "metric": {"type": "boolean"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}});
    assert_eq!(
        valid_example(&schema, "Utrecht"),
        json!({"city": "Utrecht", "days": 1, "metric": true, "unit": "celsius"})
    );
    assert_eq!(valid_example(&json!({"properties": {"q": {}}}), ""), json!({"q": "x"}));
}

/// What pydantic (openai `parse`, instructor, LangChain) sends: `$defs`,
/// `$ref`s, nullable fields as `anyOf` with `null`, lists of models.
#[test]
fn a_pydantic_schema_with_refs_and_nullable_fields() {
    let schema = json!({
        "$defs": {
            "Address": {"type": "object", "additionalProperties": false, "required": ["street", "zip"],
                "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^.*$"}}},
            "Role": {"type": "string", "enum": ["admin", "user"]}
        },
        "type": "object", "additionalProperties": false,
        "required": ["name", "age", "email", "address", "roles", "nickname", "tags"],
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "age": {"type": "integer", "exclusiveMinimum": 17, "maximum": 130},
            "email": {"type": "string", "format": "email"},
            "address": {"$ref": "#/$defs/Address"},
            "roles": {"type": "array", "items": {"$ref": "#/$defs/Role"}, "minItems": 1},
            "nickname": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}, "minItems": 2, "uniqueItems": true},
            "score": {"type": "number", "exclusiveMaximum": 1, "exclusiveMinimum": 0}
        }
    });
    let value = valid_example(&schema, "Ada Lovelace");
    assert_eq!(value["age"], 18);
    assert_eq!(value["address"], json!({"street": "Ada Lovelace", "zip": "Ada Lovelace"}));
    assert_eq!(value["roles"], json!(["admin"]));
    assert_eq!(value["nickname"], "Ada", "a nullable field gets a value");
    assert_eq!(value["tags"], json!(["Ada Lovelace", "Ada Lovelace 2"]));
    assert_eq!(value["score"], 0.5);
}

#[test]
fn a_recursive_schema_ends() {
    let schema = json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object", "required": ["name", "children", "parent"],
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}}}}});
    let value = valid_example(&schema, "n");
    assert_eq!(value["name"], "n");
    let list = json!({"type": "object", "properties": {"next": {"$ref": "#"}, "value": {"type": "integer"}}});
    valid_example(&list, "n");
}

#[test]
fn combinators_constants_tuples_and_bounds() {
    let schemas = [
        json!({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"const": "fixed"}}, "required": ["b"]}], "unevaluatedProperties": false}),
        json!({"oneOf": [{"type": "integer", "multipleOf": 5, "minimum": 12}, {"type": "string"}]}),
        json!({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "items": false, "minItems": 2}),
        json!({"type": "array", "maxItems": 0}),
        json!({"type": "number", "minimum": 2.5, "multipleOf": 0.5}),
        json!({"type": "integer", "maximum": -3}),
        json!({"type": "number", "exclusiveMaximum": -10}),
        json!({"type": "string", "minLength": 12, "maxLength": 14}),
        json!({"type": "object", "required": ["x"], "minProperties": 3, "additionalProperties": {"type": "integer"}}),
        json!({"type": "object", "required": ["free"]}),
        json!(true),
        json!({"type": "null"}),
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
            "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false, "minItems": 2}),
    ];
    for schema in &schemas {
        valid_example(schema, "some words here");
    }
    assert_eq!(example(&schemas[1], ""), 15);
}

#[test]
fn formats_are_written_as_their_format() {
    for format in
        ["date-time", "date", "time", "email", "hostname", "ipv4", "ipv6", "uri", "uuid", "duration"]
    {
        let value = valid_example(&json!({"type": "string", "format": format}), "not a date");
        assert_ne!(value, "not a date", "{format}");
    }
}

/// Gemini's own schema dialect: upper-case types, `nullable`.
#[test]
fn gemini_types_in_upper_case() {
    let schema = json!({"type": "OBJECT", "properties": {"n": {"type": "INTEGER", "nullable": true},
        "list": {"type": "ARRAY", "items": {"type": "STRING"}}}});
    assert_eq!(example(&schema, "hi"), json!({"n": 1, "list": ["hi"]}));
}
