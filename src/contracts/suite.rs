//! A contract suite: one TOML file per route in `contract-tests/`.
//!
//! Everything that can be checked without a provider is checked when the
//! file loads — unknown keys, template syntax, rule contradictions, the
//! schema compiling — and every error names the file and the key, so a
//! broken suite is found by `contract run` before it costs a provider call.
//! What depends on a case's variables (an unresolved placeholder) is left to
//! the rendering check, which names the case.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::embeddings::EmbeddingContract;
use super::rules::Rules;
use super::template::Template;
use super::tools::{Expect, ToolSet, ToolSpec};
use crate::jobs::{canonical_json, sha256_hex};

/// The highest temperature a suite may run at: the contract is about the
/// structure a provider keeps, not about sampling noise.
pub const MAX_TEMPERATURE: f64 = 0.2;
const DEFAULT_REPEATS: u32 = 2;
const DEFAULT_MAX_TOKENS: u32 = 256;
/// Bumped when the fingerprint's input changes shape, so every record made
/// under the old scheme goes stale instead of matching by accident.
const FINGERPRINT_VERSION: u32 = 1;

/// Why a suite cannot be used: the same shape as a config error — the
/// file, the key, and what is wrong.
pub type SuiteError = crate::config::ConfigError;

/// One input the suite runs the route with.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// The answer must call this tool (and no other).
    #[serde(default)]
    pub expect_tool: Option<String>,
    /// The answer must (`tool_call`) or must not (`no_tool_call`) call a tool.
    #[serde(default)]
    pub expect: Option<CaseExpect>,
    /// This case's `tool_choice`, instead of the suite's.
    #[serde(default)]
    pub tool_choice: Option<Value>,
}

/// A case's `expect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseExpect {
    ToolCall,
    NoToolCall,
}

impl Case {
    /// What the case itself demands about tools, if anything.
    fn explicit(&self) -> Result<Option<Expect>, &'static str> {
        Ok(match (&self.expect_tool, self.expect) {
            (Some(_), Some(CaseExpect::NoToolCall)) => return Err("contradicts expect_tool"),
            (Some(name), _) => Some(Expect::Call(name.clone())),
            (None, Some(CaseExpect::ToolCall)) => Some(Expect::AnyCall),
            (None, Some(CaseExpect::NoToolCall)) => Some(Expect::NoCall),
            (None, None) => None,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    route: String,
    #[serde(default)]
    description: String,
    prompt: PromptFile,
    schema: Option<String>,
    #[serde(default)]
    rules: Rules,
    #[serde(default)]
    temperature: f64,
    #[serde(default = "default_repeats")]
    repeats: u32,
    #[serde(default = "default_max_tokens")]
    max_tokens: u32,
    #[serde(default)]
    tools: Vec<ToolSpec>,
    tool_choice: Option<Value>,
    #[serde(default)]
    cases: Vec<Case>,
    /// An embeddings suite: the user template is the input embedded.
    embeddings: Option<EmbeddingContract>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptFile {
    system: Option<String>,
    user: String,
}

fn default_repeats() -> u32 {
    DEFAULT_REPEATS
}

fn default_max_tokens() -> u32 {
    DEFAULT_MAX_TOKENS
}

/// A loaded, validated suite.
#[derive(Debug, Clone)]
pub struct Suite {
    path: PathBuf,
    route: String,
    description: String,
    system: Option<Template>,
    user: Template,
    schema_path: Option<String>,
    schema: Option<Value>,
    rules: Rules,
    temperature: f64,
    repeats: u32,
    max_tokens: u32,
    /// Declared tools, compiled once here: the checker and the gate share them.
    tools: ToolSet,
    tool_choice: Option<Value>,
    cases: Vec<Case>,
    /// Per case, in order: what its answers must do about tools.
    expectations: Vec<Expect>,
    /// Set for an embeddings suite (see [`EmbeddingContract`]).
    embeddings: Option<EmbeddingContract>,
    fingerprint: String,
}

impl Suite {
    /// Reads and validates one suite file; its schema is read relative to
    /// the file's directory.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| SuiteError::Read { path: path.to_owned(), source })?;
        Suite::from_toml(path, &text)
    }

    /// Every `*.toml` suite in `dir`, sorted by file name. Two suites for
    /// the same route are an error: which one gates failover would be luck.
    pub fn load_dir(dir: &Path) -> Result<Vec<Suite>, SuiteError> {
        let read_err = |source| SuiteError::Read { path: dir.to_owned(), source };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_err)? {
            let path = entry.map_err(read_err)?.path();
            if path.extension().is_some_and(|ext| ext == "toml") && path.is_file() {
                paths.push(path);
            }
        }
        paths.sort();
        let mut suites: Vec<Suite> = Vec::with_capacity(paths.len());
        for path in paths {
            let suite = Suite::load(&path)?;
            if let Some(other) = suites.iter().find(|other| other.route == suite.route) {
                return Err(invalid(
                    &path,
                    "route",
                    format!("route `{}` already has a suite in {}", suite.route, other.path.display()),
                ));
            }
            suites.push(suite);
        }
        Ok(suites)
    }

    /// Parses and validates `text` as if read from `path`.
    pub fn from_toml(path: &Path, text: &str) -> Result<Suite, SuiteError> {
        let file: SuiteFile = toml::from_str(text).map_err(|err| SuiteError::Parse {
            path: path.to_owned(),
            message: err.to_string().trim_end().to_owned(),
        })?;
        let system = match &file.prompt.system {
            Some(source) => Some(parse_template(path, "prompt.system", source)?),
            None => None,
        };
        let user = parse_template(path, "prompt.user", &file.prompt.user)?;
        let schema = match &file.schema {
            Some(relative) => Some(read_schema(path, relative)?),
            None => None,
        };
        let tools = ToolSet::compile(&file.tools)
            .map_err(|err| invalid(path, &format!("tools[{}].{}", err.index, err.key), err.message))?;
        let expectations = expectations(path, &tools, file.tool_choice.as_ref(), &file.cases)?;
        let suite = Suite {
            path: path.to_owned(),
            route: file.route,
            description: file.description,
            system,
            user,
            schema_path: file.schema,
            schema,
            rules: file.rules,
            temperature: file.temperature,
            repeats: file.repeats,
            max_tokens: file.max_tokens,
            tools,
            tool_choice: file.tool_choice,
            cases: file.cases,
            expectations,
            embeddings: file.embeddings,
            fingerprint: String::new(),
        };
        suite.validate()?;
        let fingerprint = suite.compute_fingerprint()?;
        Ok(Suite { fingerprint, ..suite })
    }

    fn validate(&self) -> Result<(), SuiteError> {
        let fail = |key: &str, message: String| Err(invalid(&self.path, key, message));
        if self.route.trim().is_empty() {
            return fail("route", "is empty".into());
        }
        if !self.temperature.is_finite() || !(0.0..=MAX_TEMPERATURE).contains(&self.temperature) {
            return fail("temperature", format!("{} is not within 0..={MAX_TEMPERATURE}", self.temperature));
        }
        if self.repeats == 0 {
            return fail("repeats", "must be at least 1".into());
        }
        if self.max_tokens == 0 {
            return fail("max_tokens", "must be at least 1".into());
        }
        if let Some((key, message)) = self.rules.inconsistencies(self.schema.is_some()).into_iter().next() {
            return fail(&key, message);
        }
        if self.cases.is_empty() {
            return fail("cases", "a suite needs at least one [[cases]]".into());
        }
        if let Some(embeddings) = &self.embeddings {
            self.validate_embeddings(embeddings)?;
        }
        let used: BTreeSet<&str> = self.templates().flat_map(Template::placeholders).collect();
        let mut names = BTreeSet::new();
        for (index, case) in self.cases.iter().enumerate() {
            let key = format!("cases[{index}]");
            if case.name.trim().is_empty() {
                return fail(&format!("{key}.name"), "is empty".into());
            }
            if !names.insert(case.name.as_str()) {
                return fail(&format!("{key}.name"), format!("`{}` names another case too", case.name));
            }
            if let Some(unused) = case.vars.keys().find(|var| !used.contains(var.as_str())) {
                return fail(
                    &format!("{key}.vars.{unused}"),
                    format!("case `{}` sets `{unused}`, which no template uses", case.name),
                );
            }
        }
        Ok(())
    }

    /// An embeddings suite sends its user template as the input and checks
    /// vectors: what only makes sense for chat answers is refused by name.
    fn validate_embeddings(&self, embeddings: &EmbeddingContract) -> Result<(), SuiteError> {
        let fail = |key: &str, what: &str| {
            Err(invalid(&self.path, key, format!("an embeddings suite has no {what}; it embeds prompt.user")))
        };
        if embeddings.dimensions == 0 {
            return Err(invalid(&self.path, "embeddings.dimensions", "must be at least 1".into()));
        }
        if self.system.is_some() {
            return fail("prompt.system", "system prompt");
        }
        if self.schema.is_some() {
            return fail("schema", "schema");
        }
        if self.rules != Rules::default() {
            return fail("rules", "rules");
        }
        if !self.tools.is_empty() || self.tool_choice.is_some() {
            return fail("tools", "tools");
        }
        Ok(())
    }

    /// SHA-256 over the canonical JSON of everything that decides what the
    /// suite tests. TOML layout, comments, the description and the order
    /// of rule keys do not count; the order of cases does.
    fn compute_fingerprint(&self) -> Result<String, SuiteError> {
        let fail = |err: serde_json::Error| invalid(&self.path, "fingerprint", err.to_string());
        // Tool keys are added only when used, so a suite without tools keeps
        // the fingerprint (and the records) it had before they existed.
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|case| {
                let mut value = json!({"name": case.name, "vars": case.vars});
                if let Some(tool) = &case.expect_tool {
                    value["expect_tool"] = tool.clone().into();
                }
                if let Some(expect) = case.expect {
                    value["expect"] = serde_json::to_value(expect).map_err(fail)?;
                }
                if let Some(choice) = &case.tool_choice {
                    value["tool_choice"] = choice.clone();
                }
                Ok(value)
            })
            .collect::<Result<_, SuiteError>>()?;
        let mut input = json!({
            "version": FINGERPRINT_VERSION,
            "system": self.system.as_ref().map(Template::source),
            "user": self.user.source(),
            "schema": self.schema,
            "rules": serde_json::to_value(&self.rules).map_err(fail)?,
            "temperature": self.temperature,
            "repeats": self.repeats,
            "max_tokens": self.max_tokens,
            "cases": cases,
        });
        if !self.tools.is_empty() {
            input["tools"] = self.tools.to_request();
        }
        if let Some(choice) = &self.tool_choice {
            input["tool_choice"] = choice.clone();
        }
        if let Some(embeddings) = &self.embeddings {
            input["embeddings"] = serde_json::to_value(embeddings).map_err(fail)?;
        }
        Ok(sha256_hex(canonical_json(&input).map_err(fail)?.as_bytes()))
    }

    fn templates(&self) -> impl Iterator<Item = &Template> {
        self.system.iter().chain(std::iter::once(&self.user))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn system(&self) -> Option<&Template> {
        self.system.as_ref()
    }

    pub fn user(&self) -> &Template {
        &self.user
    }

    /// The `schema` path as written in the suite (relative to it).
    pub fn schema_path(&self) -> Option<&str> {
        self.schema_path.as_deref()
    }

    pub fn schema(&self) -> Option<&Value> {
        self.schema.as_ref()
    }

    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// What an embeddings suite demands; `None` for a chat suite.
    pub fn embeddings(&self) -> Option<&EmbeddingContract> {
        self.embeddings.as_ref()
    }

    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    pub fn repeats(&self) -> u32 {
        self.repeats
    }

    pub fn max_tokens(&self) -> u32 {
        self.max_tokens
    }

    pub fn cases(&self) -> &[Case] {
        &self.cases
    }

    /// The declared `[[tools]]`, compiled; empty when the suite has none.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// The `tool_choice` sent with every case that sets none, as written.
    pub fn tool_choice(&self) -> Option<&Value> {
        self.tool_choice.as_ref()
    }

    /// The `tool_choice` `case` is sent with: its own, else the suite's.
    pub fn tool_choice_of<'a>(&'a self, case: &'a Case) -> Option<&'a Value> {
        case.tool_choice.as_ref().or(self.tool_choice.as_ref())
    }

    /// What `case`'s answers must do about tools: its own `expect_tool` /
    /// `expect`, narrowed by the suite's `tool_choice`.
    pub fn expectation(&self, case: &Case) -> Expect {
        self.cases
            .iter()
            .position(|own| own.name == case.name)
            .and_then(|index| self.expectations.get(index))
            .cloned()
            .unwrap_or(Expect::Either)
    }

    /// True when answers must be JSON objects: the suite has a schema or
    /// rules about keys.
    pub fn expects_json(&self) -> bool {
        self.schema.is_some() || self.rules.constrains_keys()
    }

    /// SHA-256 hex of the suite's content; a record made under another
    /// fingerprint is stale.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

fn invalid(path: &Path, key: &str, message: String) -> SuiteError {
    SuiteError::Invalid { path: path.to_owned(), key: key.to_owned(), message }
}

fn parse_template(path: &Path, key: &str, source: &str) -> Result<Template, SuiteError> {
    if source.trim().is_empty() {
        return Err(invalid(path, key, "is empty".into()));
    }
    Template::parse(source).map_err(|err| invalid(path, key, err.to_string()))
}

/// Every case's expectation about tools: its own, narrowed by what the
/// suite's `tool_choice` demands of every answer. Contradictions, and tools
/// named but not declared, are load errors naming the key.
fn expectations(
    path: &Path,
    tools: &ToolSet,
    tool_choice: Option<&Value>,
    cases: &[Case],
) -> Result<Vec<Expect>, SuiteError> {
    let declared = |key: &str, name: &str| {
        if tools.contains(name) {
            Ok(())
        } else {
            Err(invalid(path, key, format!("names `{name}`, which no [[tools]] declares")))
        }
    };
    let read_choice = |key: &str, tool_choice: Option<&Value>| {
        let choice = match tool_choice {
            None => Expect::Either,
            Some(_) if tools.is_empty() => {
                return Err(invalid(path, key, "the suite declares no [[tools]] to choose from".into()));
            }
            Some(value) => Expect::from_tool_choice(value).map_err(|message| invalid(path, key, message))?,
        };
        if let Expect::Call(name) = &choice {
            declared(key, name)?;
        }
        Ok(choice)
    };
    let suite_choice = read_choice("tool_choice", tool_choice)?;
    let mut found = Vec::with_capacity(cases.len());
    for (index, case) in cases.iter().enumerate() {
        let key = |field: &str| format!("cases[{index}].{field}");
        let choice = match &case.tool_choice {
            Some(own) => read_choice(&key("tool_choice"), Some(own))?,
            None => suite_choice.clone(),
        };
        let field = if case.expect_tool.is_some() { "expect_tool" } else { "expect" };
        let explicit = case.explicit().map_err(|message| invalid(path, &key("expect"), message.into()))?;
        if explicit.is_some() && tools.is_empty() {
            return Err(invalid(path, &key(field), "the suite declares no [[tools]]".into()));
        }
        if let Some(name) = &case.expect_tool {
            declared(&key("expect_tool"), name)?;
        }
        let expect = match (explicit, &choice) {
            (None, choice) => choice.clone(),
            (Some(own), Expect::Either) => own,
            (Some(Expect::AnyCall), Expect::Call(name)) => Expect::Call(name.clone()),
            (Some(own), choice)
                if own == *choice || matches!((&own, choice), (Expect::Call(_), Expect::AnyCall)) =>
            {
                own
            }
            (Some(_), _) => {
                return Err(invalid(path, &key(field), "contradicts the suite's tool_choice".into()));
            }
        };
        found.push(expect);
    }
    Ok(found)
}

/// Reads, parses and compiles the schema once here, so a bad schema is a
/// load error rather than a failure of every case.
fn read_schema(path: &Path, relative: &str) -> Result<Value, SuiteError> {
    let file = path.parent().unwrap_or(Path::new(".")).join(relative);
    let fail = |message: String| invalid(path, "schema", format!("{}: {message}", file.display()));
    let text = std::fs::read_to_string(&file).map_err(|err| fail(format!("cannot read: {err}")))?;
    let schema: Value = serde_json::from_str(&text).map_err(|err| fail(format!("not JSON: {err}")))?;
    jsonschema::validator_for(&schema).map_err(|err| fail(format!("not a valid JSON Schema: {err}")))?;
    Ok(schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::testing::Scratch;

    const SCHEMA: &str = r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#;

    const SUITE: &str = r#"
        route = "r"
        description = "d"
        schema = "schemas/s.json"
        [prompt]
        system = "Answer in JSON."
        user = "Text: {{text}}"
        [rules]
        allowed_keys = ["a", "b"]
        required_keys = ["a"]
        [[cases]]
        name = "one"
        vars = { text = "hello" }
        [[cases]]
        name = "two"
        vars = { text = "{{x}}" }
    "#;

    fn error_key(result: Result<Suite, SuiteError>) -> String {
        match result {
            Err(SuiteError::Invalid { key, .. }) => key,
            Err(other) => format!("other: {other}"),
            Ok(_) => "ok".into(),
        }
    }

    #[test]
    fn loads_with_defaults() {
        let scratch = Scratch::new(SCHEMA);
        let suite = scratch.suite(SUITE).unwrap();
        assert_eq!(suite.route(), "r");
        assert_eq!((suite.temperature(), suite.repeats(), suite.max_tokens()), (0.0, 2, 256));
        assert_eq!(suite.cases().len(), 2);
        assert!(suite.expects_json());
        assert_eq!(suite.fingerprint().len(), 64);
    }

    #[test]
    fn fingerprint_ignores_layout_but_not_content() {
        let scratch = Scratch::new(SCHEMA);
        let base = scratch.suite(SUITE).unwrap().fingerprint().to_owned();
        let relaid = SUITE
            .replace("description = \"d\"", "description = \"other words\"  # a comment")
            .replace("[\"a\", \"b\"]", "[ \"b\",\n \"a\" ]")
            .replace("vars = { text = \"hello\" }", "[cases.vars]\ntext = 'hello'");
        assert_eq!(scratch.suite(&relaid).unwrap().fingerprint(), base);
        for (from, to) in [
            ("\"hello\"", "\"hello!\""),
            ("Text: {{text}}", "Input: {{text}}"),
            ("Answer in JSON.", "Answer in JSON only."),
            ("required_keys = [\"a\"]", "required_keys = [\"b\"]"),
            ("route = \"r\"", "route = \"r\"\nrepeats = 3"),
            ("route = \"r\"", "route = \"r\"\ntemperature = 0.1"),
            ("route = \"r\"", "route = \"r\"\nmax_tokens = 100"),
        ] {
            let edited = SUITE.replace(from, to);
            assert_ne!(edited, SUITE, "{from} not found");
            assert_ne!(scratch.suite(&edited).unwrap().fingerprint(), base, "{from} -> {to}");
        }
        std::fs::write(scratch.0.join("schemas/s.json"), SCHEMA.replace("string", "number")).unwrap();
        assert_ne!(scratch.suite(SUITE).unwrap().fingerprint(), base, "schema edit");
        std::fs::write(scratch.0.join("schemas/s.json"), format!("\n  {SCHEMA}\n")).unwrap();
        assert_eq!(scratch.suite(SUITE).unwrap().fingerprint(), base, "schema whitespace");
    }

    #[test]
    fn invalid_suites_name_the_key() {
        let scratch = Scratch::new(SCHEMA);
        let cases = [
            ("route = \"r\"", "route = \"r\"\ntemperature = 0.3", "temperature"),
            ("route = \"r\"", "route = \"r\"\nrepeats = 0", "repeats"),
            ("route = \"r\"", "route = \"r\"\nmax_tokens = 0", "max_tokens"),
            ("route = \"r\"", "route = \" \"", "route"),
            ("Text: {{text}}", "Text: {{text", "prompt.user"),
            ("Answer in JSON.", "{{bad name}}", "prompt.system"),
            ("name = \"two\"", "name = \"one\"", "cases[1].name"),
            ("{ text = \"hello\" }", "{ text = \"hello\", txet = \"typo\" }", "cases[0].vars.txet"),
            ("required_keys = [\"a\"]", "required_keys = [\"c\"]", "rules.required_keys.c"),
            ("schema = \"schemas/s.json\"", "schema = \"schemas/missing.json\"", "schema"),
        ];
        for (from, to, key) in cases {
            let edited = SUITE.replace(from, to);
            assert_ne!(edited, SUITE, "{from} not found");
            assert_eq!(error_key(scratch.suite(&edited)), key, "{to}");
        }
        let no_cases = SUITE.split("[[cases]]").next().unwrap();
        assert_eq!(error_key(scratch.suite(no_cases)), "cases");
        std::fs::write(scratch.0.join("schemas/s.json"), r#"{"type": 12}"#).unwrap();
        assert_eq!(error_key(scratch.suite(SUITE)), "schema");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let scratch = Scratch::new(SCHEMA);
        for (from, to) in [
            ("route = \"r\"", "route = \"r\"\ntemprature = 0"),
            ("user = ", "assistant = \"x\"\nuser = "),
            ("name = \"one\"", "name = \"one\"\ninput = \"x\""),
            ("[rules]", "[rules]\nforbidden_keys = []"),
        ] {
            let message = match scratch.suite(&SUITE.replace(from, to)) {
                Err(SuiteError::Parse { path, message }) => {
                    assert!(path.ends_with("s.toml"));
                    message
                }
                other => panic!("{to}: {other:?}"),
            };
            assert!(message.contains("unknown field"), "{message}");
        }
    }

    const TOOLS: &str = r#"
        route = "t"
        tool_choice = "auto"
        [prompt]
        user = "Weather in {{city}}?"
        [[tools]]
        name = "get_weather"
        description = "The weather in a city."
        parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
        [[tools]]
        name = "get_time"
        [[cases]]
        name = "forced"
        vars = { city = "Utrecht" }
        expect_tool = "get_weather"
        [[cases]]
        name = "any"
        vars = { city = "Oslo" }
        expect = "tool_call"
        [[cases]]
        name = "free"
        vars = { city = "Rome" }
    "#;

    #[test]
    fn tools_and_expectations_load() {
        let scratch = Scratch::new(SCHEMA);
        let suite = scratch.suite(TOOLS).unwrap();
        let names: Vec<&str> = suite.tools().specs().map(|tool| tool.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time"]);
        assert_eq!(suite.tool_choice(), Some(&json!("auto")));
        let expects: Vec<Expect> = suite.cases().iter().map(|case| suite.expectation(case)).collect();
        assert_eq!(expects, [Expect::Call("get_weather".into()), Expect::AnyCall, Expect::Either]);
        assert!(!suite.expects_json());
        // A forced tool_choice narrows every case.
        let forced = TOOLS.replace(
            "tool_choice = \"auto\"",
            "tool_choice = { type = \"function\", function = { name = \"get_weather\" } }",
        );
        let suite = scratch.suite(&forced).unwrap();
        assert!(
            suite.cases().iter().all(|case| suite.expectation(case) == Expect::Call("get_weather".into()))
        );
        // A case's own tool_choice wins over the suite's.
        let own = TOOLS.replace("name = \"free\"", "name = \"free\"\ntool_choice = \"none\"");
        let suite = scratch.suite(&own).unwrap();
        assert_eq!(suite.expectation(&suite.cases()[2]), Expect::NoCall);
        assert_eq!(suite.tool_choice_of(&suite.cases()[2]), Some(&json!("none")));
        assert_eq!(suite.tool_choice_of(&suite.cases()[0]), Some(&json!("auto")));
    }

    #[test]
    fn tool_keys_are_validated() {
        let scratch = Scratch::new(SCHEMA);
        let cases = [
            ("name = \"get_time\"", "name = \"get_weather\"", "tools[1].name"),
            ("name = \"get_time\"", "name = \"get time\"", "tools[1].name"),
            ("required = [\"city\"] }", "required = \"city\" }", "tools[0].parameters"),
            ("tool_choice = \"auto\"", "tool_choice = \"always\"", "tool_choice"),
            (
                "tool_choice = \"auto\"",
                "tool_choice = { type = \"function\", function = { name = \"nope\" } }",
                "tool_choice",
            ),
            ("expect_tool = \"get_weather\"", "expect_tool = \"nope\"", "cases[0].expect_tool"),
            (
                "expect_tool = \"get_weather\"",
                "expect_tool = \"get_weather\"\nexpect = \"no_tool_call\"",
                "cases[0].expect",
            ),
            ("tool_choice = \"auto\"", "tool_choice = \"none\"", "cases[0].expect_tool"),
            ("name = \"free\"", "name = \"free\"\ntool_choice = \"sometimes\"", "cases[2].tool_choice"),
            ("name = \"any\"", "name = \"any\"\ntool_choice = \"none\"", "cases[1].expect"),
            ("tool_choice = \"auto\"", "tool_choice = \"required\"\n", "ok"),
            (
                "tool_choice = \"auto\"",
                "tool_choice = { type = \"function\", function = { name = \"get_time\" } }",
                "cases[0].expect_tool",
            ),
        ];
        for (from, to, key) in cases {
            let edited = TOOLS.replace(from, to);
            assert_ne!(edited, TOOLS, "{from} not found");
            assert_eq!(error_key(scratch.suite(&edited)), key, "{to}");
        }
        // Expectations and a tool_choice need tools to be about.
        let without_tools = SUITE.replace("name = \"one\"", "name = \"one\"\nexpect = \"tool_call\"");
        assert_eq!(error_key(scratch.suite(&without_tools)), "cases[0].expect");
        let without_tools = SUITE.replace("route = \"r\"", "route = \"r\"\ntool_choice = \"auto\"");
        assert_eq!(error_key(scratch.suite(&without_tools)), "tool_choice");
        for (from, to) in [
            ("name = \"get_time\"", "name = \"get_time\"\nstrict = true"),
            ("expect = \"tool_call\"", "expect = \"tool_calls\""),
            ("name = \"free\"", "name = \"free\"\nexpect_tools = \"get_time\""),
        ] {
            assert!(matches!(scratch.suite(&TOOLS.replace(from, to)), Err(SuiteError::Parse { .. })), "{to}");
        }
    }

    #[test]
    fn tools_count_in_the_fingerprint_only_when_used() {
        let scratch = Scratch::new(SCHEMA);
        let base = scratch.suite(TOOLS).unwrap().fingerprint().to_owned();
        for (from, to) in [
            ("The weather in a city.", "The weather."),
            ("city = { type = \"string\" }", "city = { type = \"string\", minLength = 1 }"),
            ("tool_choice = \"auto\"", "tool_choice = \"required\""),
            ("expect = \"tool_call\"", "expect_tool = \"get_time\""),
            ("name = \"free\"", "name = \"free\"\nexpect = \"no_tool_call\""),
            ("name = \"free\"", "name = \"free\"\ntool_choice = \"none\""),
        ] {
            let edited = TOOLS.replace(from, to);
            assert_ne!(edited, TOOLS, "{from} not found");
            assert_ne!(scratch.suite(&edited).unwrap().fingerprint(), base, "{to}");
        }
        // The fingerprint of a suite without tools is what it was before tools existed.
        let plain = scratch.suite(SUITE).unwrap();
        let cases: Vec<Value> =
            plain.cases().iter().map(|case| json!({"name": case.name, "vars": case.vars})).collect();
        let before = json!({
            "version": FINGERPRINT_VERSION, "system": "Answer in JSON.", "user": "Text: {{text}}",
            "schema": plain.schema(), "rules": serde_json::to_value(plain.rules()).unwrap(),
            "temperature": 0.0, "repeats": 2, "max_tokens": 256, "cases": cases,
        });
        assert_eq!(plain.fingerprint(), sha256_hex(canonical_json(&before).unwrap().as_bytes()));
    }

    #[test]
    fn load_dir_rejects_two_suites_for_one_route() {
        let scratch = Scratch::new(SCHEMA);
        std::fs::write(scratch.0.join("a.toml"), SUITE).unwrap();
        assert_eq!(Suite::load_dir(&scratch.0).unwrap().len(), 1);
        std::fs::write(scratch.0.join("b.toml"), SUITE).unwrap();
        assert!(
            matches!(Suite::load_dir(&scratch.0), Err(SuiteError::Invalid { key, .. }) if key == "route")
        );
    }

    /// An embeddings suite embeds `prompt.user`; what only a chat answer
    /// could be judged by is refused by name, and `[embeddings]` counts in
    /// the fingerprint.
    #[test]
    fn an_embeddings_suite_refuses_what_only_chat_has() {
        let base = "route = \"e\"\n[prompt]\nuser = \"{{text}}\"\n[embeddings]\ndimensions = 8\n\
                    [[cases]]\nname = \"one\"\nvars = { text = \"hi\" }\n";
        let path = Path::new("e.toml");
        let suite = Suite::from_toml(path, base);
        assert!(suite.as_ref().is_ok_and(|s| s.embeddings().map(|e| e.dimensions) == Some(8)));
        let other = Suite::from_toml(path, &base.replace("dimensions = 8", "dimensions = 9"));
        assert_ne!(
            suite.map(|s| s.fingerprint().to_owned()).ok(),
            other.map(|s| s.fingerprint().to_owned()).ok()
        );
        let with_system = base.replace("[prompt]\n", "[prompt]\nsystem = \"s\"\n");
        assert_eq!(error_key(Suite::from_toml(path, &with_system)), "prompt.system");
        let with_rules = format!("{base}[rules]\nplain_text = true\n");
        assert_eq!(error_key(Suite::from_toml(path, &with_rules)), "rules");
        assert_eq!(error_key(Suite::from_toml(path, &base.replace("= 8", "= 0"))), "embeddings.dimensions");
    }
}
