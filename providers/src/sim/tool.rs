//! The tool calls the simulator answers with (`tool_call`, `tool=NAME`,
//! `tool_args=bad`): the tool the request offers or forces, with arguments
//! built from its JSON schema, so a client's validation has something real
//! to accept — or, for contract tests, to reject.

use serde_json::{Map, Value, json};

/// The tools a request offers, in either dialect, and the one it forces.
#[derive(Debug, Default)]
pub(crate) struct Offered {
    /// `(name, parameters schema)` in the order offered.
    tools: Vec<(String, Value)>,
    forced: Option<String>,
}

/// One tool call, its arguments both parsed and as the JSON string sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) input: Value,
    pub(crate) arguments: String,
}

/// Used when the request offers no tool and the script names none.
const FALLBACK_NAME: &str = "sim_tool";

impl Offered {
    /// OpenAI (`tools[].function`, `tool_choice.function.name`) and
    /// Anthropic (`tools[].input_schema`, `tool_choice.name`) alike.
    pub(crate) fn read(body: &Value) -> Offered {
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|tool| {
                let name = tool.pointer("/function/name").or_else(|| tool.get("name"))?.as_str()?;
                let schema = tool.pointer("/function/parameters").or_else(|| tool.get("input_schema"));
                Some((name.to_owned(), schema.cloned().unwrap_or(Value::Null)))
            })
            .collect();
        let choice = body.get("tool_choice");
        let forced = match choice.and_then(|c| c.get("type")).and_then(Value::as_str) {
            Some("function") => choice.and_then(|c| c.pointer("/function/name")),
            Some("tool") => choice.and_then(|c| c.get("name")),
            _ => None,
        };
        Offered { tools, forced: forced.and_then(Value::as_str).map(str::to_owned) }
    }

    /// The call: the scripted name, else the forced tool, else the first
    /// offered; arguments that validate against its schema unless `bad`.
    pub(crate) fn call(&self, scripted: Option<&str>, bad: bool, text: &str, id: String) -> Call {
        let first = self.tools.first().map(|(name, _)| name.as_str());
        let name = scripted.or(self.forced.as_deref()).or(first).unwrap_or(FALLBACK_NAME);
        let schema = self.tools.iter().find(|(n, _)| n == name).map_or(&Value::Null, |(_, schema)| schema);
        let input = if bad { invalid(schema) } else { valid(schema, text) };
        Call { id, name: name.to_owned(), arguments: input.to_string(), input }
    }
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten()
}

/// A schema's first type (`"type": ["string", "null"]` counts as string).
fn kind(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(kind) => Some(kind),
        Value::Array(kinds) => kinds.first()?.as_str(),
        _ => None,
    }
}

/// Every property filled: strings with `text` (or "x"), numbers 1,
/// booleans true, enums their first value, objects recursively.
pub(crate) fn valid(schema: &Value, text: &str) -> Value {
    let object: Map<String, Value> =
        properties(schema).map(|(key, property)| (key.clone(), value(property, text))).collect();
    Value::Object(object)
}

fn value(property: &Value, text: &str) -> Value {
    if let Some(first) = property.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    match kind(property) {
        Some("integer" | "number") => 1.into(),
        Some("boolean") => true.into(),
        Some("array") => json!([]),
        Some("object") => valid(property, text),
        Some("null") => Value::Null,
        _ if text.is_empty() => "x".into(),
        _ => text.into(),
    }
}

/// Arguments that break the schema twice over: every property of the
/// wrong type and the first required property missing (an unasked key
/// when the schema has no properties at all).
fn invalid(schema: &Value) -> Value {
    let mut object: Map<String, Value> =
        properties(schema).map(|(key, property)| (key.clone(), wrong(property))).collect();
    let required =
        schema.get("required").and_then(Value::as_array).and_then(|r| r.first()).and_then(Value::as_str);
    if let Some(required) = required {
        object.remove(required);
    }
    if object.is_empty() && required.is_none() {
        object.insert("sim_unexpected".into(), true.into());
    }
    Value::Object(object)
}

fn wrong(property: &Value) -> Value {
    match kind(property) {
        Some("string") => 1.into(),
        _ => json!({"sim": "wrong type"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_follow_the_schema_or_break_it() {
        let body = json!({"tools": [
            {"type": "function", "function": {"name": "first", "parameters": {}}},
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
                    "unit": {"enum": ["c", "f"]}},
                "required": ["city"]}}}
        ], "tool_choice": {"type": "function", "function": {"name": "weather"}}});
        let offered = Offered::read(&body);
        let call = offered.call(None, false, "Utrecht", "call_1".into());
        assert_eq!(call.name, "weather");
        assert_eq!(call.input, json!({"city": "Utrecht", "days": 1, "metric": true, "unit": "c"}));
        assert_eq!(serde_json::from_str::<Value>(&call.arguments).ok(), Some(call.input));
        let bad = offered.call(None, true, "Utrecht", "call_1".into());
        assert_eq!(
            bad.input,
            json!({"days": {"sim": "wrong type"}, "metric": {"sim": "wrong type"}, "unit": {"sim": "wrong type"}})
        );
        let anthropic =
            Offered::read(&json!({"tools": [{"name": "n", "input_schema": {"properties": {"q": {}}}}]}));
        assert_eq!(anthropic.call(None, false, "", "t".into()).input, json!({"q": "x"}));
        assert_eq!(Offered::default().call(Some("named"), false, "", "t".into()).name, "named");
    }
}
