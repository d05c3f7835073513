//! Tool calls in a contract: the function tools a route offers, what an
//! answer must do about them, and the check of the calls it makes.
//!
//! A provider that calls a tool nobody offered, or passes arguments the
//! tool's `parameters` schema refuses, breaks the caller as surely as one
//! that invents a JSON key: the client's dispatcher gets a name it cannot
//! route or arguments it cannot use. So the suite run and the engine judge
//! `choices[0].message.tool_calls` of the OpenAI-shaped completion the same
//! way, with each tool's schema compiled once ([`ToolSet::compile`] at suite
//! load; [`Offer::from_request`] reuses those validators for a live
//! request's tools when they are the suite's).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::describe::{excerpt, type_name};
use crate::jobs::json_kind;

/// OpenAI accepts `[a-zA-Z0-9_-]{1,64}` as a function name.
const MAX_NAME_CHARS: usize = 64;

/// A function tool as a suite declares it (`[[tools]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema of the arguments; a tool without one takes none.
    #[serde(default = "no_parameters")]
    pub parameters: Value,
}

fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}})
}

impl ToolSpec {
    /// The tool as an OpenAI request's `tools[]` entry.
    pub fn to_request(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), self.name.clone().into());
        if !self.description.is_empty() {
            function.insert("description".into(), self.description.clone().into());
        }
        function.insert("parameters".into(), self.parameters.clone());
        json!({"type": "function", "function": function})
    }
}

/// What an answer must do about the offered tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Text, or a valid call of an offered tool (`tool_choice` `auto`).
    Either,
    /// No tool call (`tool_choice` `none`, or a case's `expect = "no_tool_call"`).
    NoCall,
    /// A call of some offered tool (`required`, or `expect = "tool_call"`).
    AnyCall,
    /// A call of this tool and no other (a forced `tool_choice`, or `expect_tool`).
    Call(String),
}

impl Expect {
    /// What an OpenAI `tool_choice` demands; `Err` says why the value is
    /// not one.
    pub fn from_tool_choice(choice: &Value) -> Result<Expect, String> {
        match choice {
            Value::String(mode) if mode == "auto" => Ok(Expect::Either),
            Value::String(mode) if mode == "none" => Ok(Expect::NoCall),
            Value::String(mode) if mode == "required" => Ok(Expect::AnyCall),
            Value::Object(object)
                if object.get("type").and_then(Value::as_str) == Some("function") && object.len() == 2 =>
            {
                match choice.pointer("/function/name").and_then(Value::as_str) {
                    Some(name) if choice["function"].as_object().is_some_and(|f| f.len() == 1) => {
                        Ok(Expect::Call(name.to_owned()))
                    }
                    _ => Err(CHOICE_FORMS.to_owned()),
                }
            }
            _ => Err(CHOICE_FORMS.to_owned()),
        }
    }
}

const CHOICE_FORMS: &str =
    r#"must be "auto", "required", "none" or { type = "function", function = { name = "..." } }"#;

/// One tool with its compiled schema.
#[derive(Debug)]
struct Tool {
    spec: ToolSpec,
    /// `None` only for a live request's tool whose schema does not compile:
    /// its arguments are then checked to be JSON, nothing more.
    validator: Option<jsonschema::Validator>,
}

/// Offered tools by name, each schema compiled once; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<Tool>>,
    /// Names in the order declared, for requests and reasons.
    order: Vec<String>,
}

/// Why a declared tool cannot be used: its index in `[[tools]]`, the key
/// and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tools[{index}].{key}: {message}")]
pub struct ToolError {
    pub index: usize,
    pub key: &'static str,
    pub message: String,
}

impl ToolSet {
    /// Validates and compiles a suite's declared tools.
    pub fn compile(specs: &[ToolSpec]) -> Result<ToolSet, ToolError> {
        let mut set = ToolSet::default();
        for (index, spec) in specs.iter().enumerate() {
            let fail = |key, message: String| ToolError { index, key, message };
            let name = &spec.name;
            if name.is_empty()
                || name.chars().count() > MAX_NAME_CHARS
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(fail("name", format!("`{name}` is not 1 to 64 of a-z, A-Z, 0-9, _ and -")));
            }
            if set.tools.contains_key(name) {
                return Err(fail("name", format!("`{name}` names another tool too")));
            }
            if !spec.parameters.is_object() {
                return Err(fail(
                    "parameters",
                    format!("is {}, not a JSON Schema object", type_name(&spec.parameters)),
                ));
            }
            let validator = jsonschema::validator_for(&spec.parameters)
                .map_err(|err| fail("parameters", format!("not a valid JSON Schema: {err}")))?;
            set.insert(spec.clone(), Some(validator));
        }
        Ok(set)
    }

    fn insert(&mut self, spec: ToolSpec, validator: Option<jsonschema::Validator>) {
        self.order.push(spec.name.clone());
        self.tools.insert(spec.name.clone(), Arc::new(Tool { spec, validator }));
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// The declared tools, in order.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.order.iter().filter_map(|name| self.tools.get(name)).map(|tool| &tool.spec)
    }

    /// The tools as an OpenAI request's `tools`.
    pub fn to_request(&self) -> Value {
        Value::Array(self.specs().map(ToolSpec::to_request).collect())
    }

    /// Checks the tool calls of `completion`'s first choice against these
    /// tools and `expect`. `Ok(true)`: it called tools, all valid — its
    /// text is not the answer; `Ok(false)`: it called none, and that was
    /// allowed — the text is the answer, for the caller to judge.
    pub fn check(&self, completion: &Value, expect: &Expect) -> Result<bool, Vec<String>> {
        let calls = match completion.pointer("/choices/0/message/tool_calls") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(calls)) => calls.as_slice(),
            Some(other) => return Err(vec![format!("`tool_calls` is {}, not a list", type_name(other))]),
        };
        if calls.is_empty() {
            return match expect {
                Expect::Call(want) => {
                    Err(vec![format!("expected a call of tool `{want}`; the answer called no tool")])
                }
                Expect::AnyCall => Err(vec!["expected a tool call; the answer called no tool".to_owned()]),
                Expect::Either | Expect::NoCall => Ok(false),
            };
        }
        let mut reasons = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let Some(name) = call.pointer("/function/name").and_then(Value::as_str) else {
                reasons.push(format!("tool call {} names no function", index + 1));
                continue;
            };
            match expect {
                Expect::NoCall => reasons.push(format!("expected no tool call; the answer called `{name}`")),
                Expect::Call(want) if want != name => {
                    reasons.push(format!("expected a call of tool `{want}`; the answer called `{name}`"));
                }
                _ => {}
            }
            match self.tools.get(name) {
                Some(tool) => tool.check_arguments(call.pointer("/function/arguments"), &mut reasons),
                None => {
                    reasons.push(format!("tool `{name}` was called but not offered ({})", self.offered()))
                }
            }
        }
        if reasons.is_empty() { Ok(true) } else { Err(reasons) }
    }

    fn offered(&self) -> String {
        if self.order.is_empty() {
            "no tool was offered".to_owned()
        } else {
            format!("offered: {}", self.order.join(", "))
        }
    }
}

impl Tool {
    fn check_arguments(&self, arguments: Option<&Value>, reasons: &mut Vec<String>) {
        let name = &self.spec.name;
        let text = match arguments {
            Some(Value::String(text)) => text,
            Some(other) => {
                reasons.push(format!("tool `{name}`: arguments are {}, not a JSON string", json_kind(other)));
                return;
            }
            None => {
                reasons.push(format!("tool `{name}`: the call has no arguments"));
                return;
            }
        };
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(err) => {
                reasons.push(format!("tool `{name}`: arguments are not JSON ({err}): {}", excerpt(text)));
                return;
            }
        };
        let Some(validator) = &self.validator else { return };
        for error in validator.iter_errors(&value) {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() { String::new() } else { format!("at {path}: ") };
            reasons.push(format!(
                "tool `{name}`: arguments do not match its parameters: {at}{}",
                error.masked()
            ));
        }
    }
}

/// The tools a live request offers and what its `tool_choice` demands: what
/// the engine checks an answer's tool calls against on a route whose suite
/// declares tools.
#[derive(Debug, Clone)]
pub struct Offer {
    pub tools: ToolSet,
    pub expect: Expect,
}

impl Offer {
    /// Reads an OpenAI request's `tools` and `tool_choice` (its top-level
    /// fields other than messages). A tool declared by the suite with the
    /// same name and parameters keeps the suite's compiled schema, so the
    /// usual request costs no compilation; any other is compiled here. What
    /// the door let in but is not a function tool is skipped (a call of it
    /// is then "not offered"), and an unknown `tool_choice` demands nothing:
    /// the request is the client's, and judging its answer must not fail on
    /// a request shape this check does not know.
    pub fn from_request(fields: &Map<String, Value>, known: &ToolSet) -> Offer {
        let mut tools = ToolSet::default();
        let offered = fields.get("tools").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        for entry in offered {
            let Some(function) = entry.get("function") else { continue };
            let Some(name) = function.get("name").and_then(Value::as_str) else { continue };
            if tools.contains(name) {
                continue;
            }
            let parameters = function.get("parameters").cloned().unwrap_or_else(no_parameters);
            match known.tools.get(name).filter(|tool| tool.spec.parameters == parameters) {
                Some(tool) => {
                    tools.order.push(name.to_owned());
                    tools.tools.insert(name.to_owned(), Arc::clone(tool));
                }
                None => {
                    let validator = jsonschema::validator_for(&parameters).ok();
                    let description =
                        function.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
                    tools.insert(ToolSpec { name: name.to_owned(), description, parameters }, validator);
                }
            }
        }
        let expect = fields
            .get("tool_choice")
            .and_then(|choice| Expect::from_tool_choice(choice).ok())
            .unwrap_or(Expect::Either);
        Offer { tools, expect }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> ToolSpec {
        ToolSpec {
            name: "get_weather".into(),
            description: "The weather in a city.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"]
            }),
        }
    }

    fn tools() -> ToolSet {
        let time =
            ToolSpec { name: "get_time".into(), description: String::new(), parameters: no_parameters() };
        ToolSet::compile(&[weather(), time]).unwrap()
    }

    fn calling(calls: &[(&str, Value)]) -> Value {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, arguments))| {
                json!({"id": format!("call_{i}"), "type": "function",
                    "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls},
            "finish_reason": "tool_calls"}]})
    }

    fn text(content: &str) -> Value {
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
    }

    #[test]
    fn a_valid_call_of_an_offered_tool_passes() {
        let answer = calling(&[("get_weather", json!(r#"{"city": "Utrecht", "days": 2}"#))]);
        assert_eq!(tools().check(&answer, &Expect::Either), Ok(true));
        assert_eq!(tools().check(&answer, &Expect::AnyCall), Ok(true));
        assert_eq!(tools().check(&answer, &Expect::Call("get_weather".into())), Ok(true));
        let two = calling(&[("get_weather", json!(r#"{"city": "A"}"#)), ("get_time", json!("{}"))]);
        assert_eq!(tools().check(&two, &Expect::Either), Ok(true));
    }

    #[test]
    fn text_is_the_answer_unless_a_call_is_expected() {
        assert_eq!(tools().check(&text("sunny"), &Expect::Either), Ok(false));
        assert_eq!(tools().check(&text("sunny"), &Expect::NoCall), Ok(false));
        assert_eq!(
            tools().check(&text("sunny"), &Expect::Call("get_weather".into())),
            Err(vec!["expected a call of tool `get_weather`; the answer called no tool".to_owned()])
        );
        assert_eq!(
            tools().check(&json!({"choices": []}), &Expect::AnyCall),
            Err(vec!["expected a tool call; the answer called no tool".to_owned()])
        );
    }

    #[test]
    fn a_tool_not_offered_is_named() {
        let answer = calling(&[("get_wether", json!(r#"{"city": "A"}"#))]);
        assert_eq!(
            tools().check(&answer, &Expect::Either),
            Err(vec![
                "tool `get_wether` was called but not offered (offered: get_weather, get_time)".to_owned()
            ])
        );
        assert_eq!(
            ToolSet::default().check(&answer, &Expect::Either),
            Err(vec!["tool `get_wether` was called but not offered (no tool was offered)".to_owned()])
        );
    }

    #[test]
    fn another_tool_than_the_expected_one_fails() {
        let answer = calling(&[("get_time", json!("{}"))]);
        assert_eq!(
            tools().check(&answer, &Expect::Call("get_weather".into())),
            Err(vec!["expected a call of tool `get_weather`; the answer called `get_time`".to_owned()])
        );
        assert_eq!(
            tools().check(&answer, &Expect::NoCall),
            Err(vec!["expected no tool call; the answer called `get_time`".to_owned()])
        );
    }

    #[test]
    fn arguments_must_be_json() {
        let answer = calling(&[("get_weather", json!("{city: Utrecht"))]);
        let reasons = tools().check(&answer, &Expect::Either).unwrap_err();
        assert_eq!(reasons.len(), 1);
        assert!(reasons[0].starts_with("tool `get_weather`: arguments are not JSON ("), "{reasons:?}");
        assert!(reasons[0].ends_with("): {city: Utrecht"), "{reasons:?}");
        let object = calling(&[("get_weather", json!({"city": "A"}))]);
        assert_eq!(
            tools().check(&object, &Expect::Either),
            Err(vec!["tool `get_weather`: arguments are an object, not a JSON string".to_owned()])
        );
    }

    #[test]
    fn schema_violations_say_what_is_wrong() {
        let answer = calling(&[("get_weather", json!(r#"{"days": "two"}"#))]);
        let reasons = tools().check(&answer, &Expect::Call("get_weather".into())).unwrap_err();
        assert_eq!(
            reasons,
            [
                r#"tool `get_weather`: arguments do not match its parameters: "city" is a required property"#,
                r#"tool `get_weather`: arguments do not match its parameters: at /days: value is not of type "integer""#,
            ],
        );
    }

    #[test]
    fn malformed_calls_are_reported() {
        let nameless = json!({"choices": [{"message": {"tool_calls": [{"id": "c", "function": {}}]}}]});
        assert_eq!(
            tools().check(&nameless, &Expect::Either),
            Err(vec!["tool call 1 names no function".to_owned()])
        );
        let odd = json!({"choices": [{"message": {"tool_calls": "get_weather"}}]});
        assert_eq!(
            tools().check(&odd, &Expect::Either),
            Err(vec!["`tool_calls` is string, not a list".to_owned()])
        );
    }

    #[test]
    fn declared_tools_are_validated() {
        let error = |spec: ToolSpec| ToolSet::compile(&[weather(), spec]).unwrap_err();
        let named = |name: &str| ToolSpec { name: name.into(), ..weather() };
        assert_eq!(error(named("get_weather")).key, "name");
        assert_eq!(error(named("get weather")).key, "name");
        assert_eq!(error(named(&"x".repeat(65))).index, 1);
        assert_eq!(error(ToolSpec { parameters: json!({"type": 5}), ..named("a") }).key, "parameters");
        assert_eq!(error(ToolSpec { parameters: json!("object"), ..named("a") }).key, "parameters");
    }

    #[test]
    fn tool_choice_forms() {
        assert_eq!(Expect::from_tool_choice(&json!("auto")), Ok(Expect::Either));
        assert_eq!(Expect::from_tool_choice(&json!("none")), Ok(Expect::NoCall));
        assert_eq!(Expect::from_tool_choice(&json!("required")), Ok(Expect::AnyCall));
        assert_eq!(
            Expect::from_tool_choice(&json!({"type": "function", "function": {"name": "f"}})),
            Ok(Expect::Call("f".into()))
        );
        for bad in [json!("any"), json!({"type": "tool", "name": "f"}), json!({"type": "function"}), json!(3)]
        {
            assert!(Expect::from_tool_choice(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_request_offer_reuses_the_suite_schemas_and_reads_its_choice() {
        let known = tools();
        let fields = json!({
            "tools": [weather().to_request(), {"type": "function", "function": {"name": "other",
                "parameters": {"type": "object", "required": ["q"]}}}],
            "tool_choice": {"type": "function", "function": {"name": "other"}}
        });
        let offer = Offer::from_request(fields.as_object().unwrap(), &known);
        assert_eq!(offer.expect, Expect::Call("other".into()));
        assert!(
            Arc::ptr_eq(&offer.tools.tools["get_weather"], &known.tools["get_weather"]),
            "not recompiled"
        );
        assert!(!offer.tools.contains("get_time"), "only what the request offers");
        let answer = calling(&[("other", json!("{}"))]);
        assert_eq!(
            offer.tools.check(&answer, &offer.expect),
            Err(vec![
                r#"tool `other`: arguments do not match its parameters: "q" is a required property"#
                    .to_owned()
            ])
        );
        let none = Offer::from_request(&Map::new(), &known);
        assert!(none.tools.is_empty());
        assert_eq!(none.expect, Expect::Either);
    }

    #[test]
    fn requests_are_openai_tools() {
        assert_eq!(
            tools().to_request()[1],
            json!({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}})
        );
    }
}
