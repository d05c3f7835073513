//! The tool calls the simulator answers with: which tool a request's
//! `tool_choice` (or a script) makes it call, if any, and the call itself,
//! its arguments built from the tool's JSON schema so a client's
//! validation has something real to accept — or, for contract tests
//! (`tool_args=bad`), to reject.

use serde_json::{Map, Value, json};

use super::schema::{self, Kind};
use super::script::Output;

/// The tools a request offers, in any dialect, and how it lets them be used.
#[derive(Debug, Default)]
pub(crate) struct Offered {
    /// `(name, parameters schema)` in the order offered.
    tools: Vec<(String, Value)>,
    choice: Choice,
    steering: Steering,
}

/// What the last line of the user's message asks of the tools, the way a
/// person would steer a model: the first offered tool it names as a word
/// (`Use Read …`) and the string arguments it spells out as `name=value`
/// words (`file_path=/tmp/notes.txt`, a trailing `,`, `;` or `.` left
/// out). So a test can lead an agent whose first tool is not the one it
/// wants (Claude Code's is `Agent`) through a real tool call, without a
/// script.
#[derive(Debug, Default)]
struct Steering {
    tool: Option<String>,
    values: Map<String, Value>,
}

/// A request's `tool_choice`, in the words common to the dialects.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// `auto`, or nothing said: a call until a tool result answers one.
    #[default]
    Auto,
    /// `none`: words only.
    None,
    /// OpenAI's `required`, Anthropic's `any`, Gemini's `ANY` naming no
    /// function: a call of some tool (the first).
    Required,
    /// A named function or tool: a call of it.
    Named(String),
}

/// One tool call, its arguments both parsed and as the JSON string sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) input: Value,
    pub(crate) arguments: String,
}

/// Used when a script asks for a call and the request offers no tool.
const FALLBACK_NAME: &str = "sim_tool";

impl Offered {
    /// OpenAI (`tools[].function`) and Anthropic (`tools[].input_schema`)
    /// tools alike, with the `tool_choice` of either.
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
        Offered { tools, choice: Choice::read(body.get("tool_choice")), steering: Steering::default() }
    }

    /// The offered tools steered by `prompt`'s last line (see [`Steering`]).
    pub(crate) fn steered_by(mut self, prompt: &str) -> Offered {
        let line = prompt.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or_default();
        let named = |name: &str| {
            line.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).any(|word| word == name)
        };
        let tool = self.tools.iter().map(|(name, _)| name).find(|name| named(name)).cloned();
        let values = line
            .split_whitespace()
            .filter_map(|word| word.split_once('='))
            .map(|(name, value)| (name, value.trim_end_matches([',', ';', '.'])))
            .filter(|(name, value)| !name.is_empty() && !value.is_empty())
            .map(|(name, value)| (name.to_owned(), Value::String(value.to_owned())))
            .collect();
        self.steering = Steering { tool, values };
        self
    }

    /// The tool the answer calls, or `None` for words. A forced choice
    /// calls even after a tool result (a client forcing a tool wants its
    /// call); otherwise a call answers until a tool result follows the
    /// last call (`answered`), so an agent's loop ends. A tool-call script
    /// calls whatever is offered, and the tool it names if it names one;
    /// `ignore-tools` never calls.
    pub(crate) fn pick(&self, output: &Output, answered: bool) -> Option<String> {
        if output.ignore_tools && !output.tool_call {
            return None;
        }
        let first =
            self.steering.tool.as_deref().or_else(|| self.tools.first().map(|(name, _)| name.as_str()));
        let forced = match &self.choice {
            Choice::Named(name) => Some(name.as_str()),
            Choice::Required => first,
            Choice::Auto | Choice::None => None,
        };
        if output.tool_call {
            let name = output.tool_name.as_deref().or(forced).or(first).unwrap_or(FALLBACK_NAME);
            let forcing = matches!(self.choice, Choice::Named(_) | Choice::Required);
            return (forcing || !answered).then(|| name.to_owned());
        }
        match &self.choice {
            Choice::None => None,
            Choice::Named(_) | Choice::Required => forced.map(str::to_owned),
            Choice::Auto => first.filter(|_| !answered).map(str::to_owned),
        }
    }

    /// The call of `name`: arguments that validate against its schema
    /// (strings from `text`), or, when `bad`, that break it. A call the
    /// prompt steered carries what a model asked that way would send: the
    /// required arguments and the ones the prompt spelled out.
    pub(crate) fn call(&self, name: &str, bad: bool, text: &str, id: String) -> Call {
        let schema = self.tools.iter().find(|(n, _)| n == name).map_or(&Value::Null, |(_, schema)| schema);
        let input = match (bad, self.steering.tool.as_deref() == Some(name)) {
            (true, _) => invalid(schema),
            (false, true) => self.steering.applied(schema, arguments(schema, text)),
            (false, false) => arguments(schema, text),
        };
        Call { id, name: name.to_owned(), arguments: input.to_string(), input }
    }
}

impl Steering {
    /// `built` cut down to the schema's required properties and those
    /// spelled out, a string property spelled out taking its value.
    fn applied(&self, root: &Value, built: Value) -> Value {
        let Value::Object(built) = built else { return built };
        let schema = schema::resolve(root, root);
        let required = |key: &str| {
            schema.get("required").and_then(Value::as_array).is_some_and(|r| r.iter().any(|k| k == key))
        };
        let strings: Vec<&String> = properties(root, schema)
            .filter(|(_, p)| schema::kind(p) == Kind::String)
            .map(|(k, _)| k)
            .collect();
        let kept = built.into_iter().filter_map(|(key, value)| match self.values.get(&key) {
            Some(given) if strings.contains(&&key) => Some((key, given.clone())),
            _ if required(&key) || self.values.contains_key(&key) => Some((key, value)),
            _ => None,
        });
        Value::Object(kept.collect())
    }
}

impl Choice {
    /// OpenAI's `"auto" | "none" | "required" | {"type": "function",
    /// "function": {"name"}}` (and the Responses API's flat `name`), and
    /// Anthropic's `{"type": "auto" | "any" | "none" | "tool", "name"}`.
    fn read(choice: Option<&Value>) -> Choice {
        let Some(choice) = choice else { return Choice::Auto };
        let kind = choice.as_str().or_else(|| choice.get("type").and_then(Value::as_str));
        let name = choice.pointer("/function/name").or_else(|| choice.get("name")).and_then(Value::as_str);
        match (kind, name) {
            (Some("function" | "tool"), Some(name)) => Choice::Named(name.to_owned()),
            (Some("none"), _) => Choice::None,
            (Some("required" | "any"), _) => Choice::Required,
            _ => Choice::Auto,
        }
    }
}

/// Arguments a tool's schema accepts: always an object (a tool declared
/// without parameters gets `{}`).
fn arguments(schema: &Value, text: &str) -> Value {
    match schema::example(schema, text) {
        Value::Object(object) => Value::Object(object),
        _ => json!({}),
    }
}

fn properties<'a>(root: &'a Value, schema: &'a Value) -> impl Iterator<Item = (&'a String, &'a Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten().map(move |(key, property)| {
        let property = schema::resolve(root, property);
        (key, property)
    })
}

/// Arguments that break the schema twice over: every property of the
/// wrong type and the first required property missing (an unasked key
/// when the schema has no properties at all).
fn invalid(root: &Value) -> Value {
    let schema = schema::resolve(root, root);
    let mut object: Map<String, Value> =
        properties(root, schema).map(|(key, property)| (key.clone(), wrong(property))).collect();
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
    match schema::kind(property) {
        Kind::String => 1.into(),
        _ => json!({"sim": "wrong type"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather_and_first(choice: Value) -> Offered {
        Offered::read(&json!({"tools": [
            {"type": "function", "function": {"name": "first", "parameters": {}}},
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
                    "unit": {"enum": ["c", "f"]}},
                "required": ["city"]}}}
        ], "tool_choice": choice}))
    }

    #[test]
    fn arguments_follow_the_schema_or_break_it() {
        let offered = weather_and_first(json!({"type": "function", "function": {"name": "weather"}}));
        let call = offered.call("weather", false, "Utrecht", "call_1".into());
        assert_eq!(call.input, json!({"city": "Utrecht", "days": 1, "metric": true, "unit": "c"}));
        assert_eq!(serde_json::from_str::<Value>(&call.arguments).ok(), Some(call.input));
        let bad = offered.call("weather", true, "Utrecht", "call_1".into());
        assert_eq!(
            bad.input,
            json!({"days": {"sim": "wrong type"}, "metric": {"sim": "wrong type"}, "unit": 1})
        );
        let anthropic =
            Offered::read(&json!({"tools": [{"name": "n", "input_schema": {"properties": {"q": {}}}}]}));
        assert_eq!(anthropic.call("n", false, "", "t".into()).input, json!({"q": "x"}));
        assert_eq!(Offered::default().call("named", false, "", "t".into()).input, json!({}));
    }

    #[test]
    fn the_choice_decides_whether_and_what_to_call() {
        let plain = Output::default();
        let scripted = Output { tool_call: true, ..Output::default() };
        let named = Output { tool_call: true, tool_name: Some("lookup".into()), ..Output::default() };
        let pick =
            |choice: Value, output: &Output, answered| weather_and_first(choice).pick(output, answered);
        let forced = json!({"type": "function", "function": {"name": "weather"}});
        assert_eq!(pick(forced.clone(), &plain, true).as_deref(), Some("weather"), "forced after a result");
        assert_eq!(
            pick(json!({"type": "tool", "name": "weather"}), &plain, false).as_deref(),
            Some("weather")
        );
        assert_eq!(pick(json!("required"), &plain, true).as_deref(), Some("first"));
        assert_eq!(pick(json!({"type": "any"}), &plain, false).as_deref(), Some("first"));
        assert_eq!(pick(json!("auto"), &plain, false).as_deref(), Some("first"));
        assert_eq!(pick(Value::Null, &plain, true), None, "a result answers the call");
        assert_eq!(pick(json!("none"), &plain, false), None);
        assert_eq!(
            pick(json!({"type": "none"}), &scripted, false).as_deref(),
            Some("first"),
            "the script wins"
        );
        assert_eq!(pick(forced, &scripted, false).as_deref(), Some("weather"));
        assert_eq!(pick(json!("auto"), &named, false).as_deref(), Some("lookup"));
        assert_eq!(pick(json!("auto"), &scripted, true), None, "the loop ends");
        assert_eq!(Offered::default().pick(&plain, false), None, "no tools, no call");
        assert_eq!(Offered::default().pick(&scripted, false).as_deref(), Some(FALLBACK_NAME));
        let deaf = Output { ignore_tools: true, ..Output::default() };
        assert_eq!(pick(json!("required"), &deaf, false), None, "ignore-tools: words, whatever is forced");
    }

    #[test]
    fn a_prompt_steers_the_call_to_the_tool_it_names() {
        let read = json!({"type": "object", "required": ["file_path"], "properties": {
            "file_path": {"type": "string"}, "limit": {"type": "integer"}, "pages": {"type": "string"}}});
        let body = json!({"tools": [
            {"name": "Agent", "input_schema": {"type": "object", "properties": {"prompt": {"type": "string"}}}},
            {"name": "Read", "input_schema": read}]});
        let prompt = "<system-reminder>Agent, Bash and Read are yours.</system-reminder>\n\
                      Use Read with file_path=/tmp/notes.txt, then answer.";
        let steered = Offered::read(&body).steered_by(prompt);
        assert_eq!(
            steered.pick(&Output::default(), false).as_deref(),
            Some("Read"),
            "named in the last line"
        );
        let call = steered.call("Read", false, prompt, "toolu_1".into());
        assert_eq!(call.input, json!({"file_path": "/tmp/notes.txt"}), "required and spelled out");
        let unsteered = Offered::read(&body).steered_by("What does notes.txt say?");
        assert_eq!(unsteered.pick(&Output::default(), false).as_deref(), Some("Agent"), "else the first");
        assert_eq!(
            unsteered.call("Read", false, "p", "t".into()).input["pages"],
            json!("p"),
            "every property"
        );
    }

    #[test]
    fn bad_arguments_break_a_schema_behind_a_ref() {
        let schema = json!({"$ref": "#/$defs/Args", "$defs": {"Args": {"type": "object",
            "properties": {"city": {"$ref": "#/$defs/City"}, "days": {"type": "integer"}}, "required": ["days"]},
            "City": {"type": "string"}}});
        assert_eq!(invalid(&schema), json!({"city": 1}));
    }
}
