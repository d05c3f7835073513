//! Runs a suite against one provider: per case, the rendering check, then
//! `repeats` full round trips through the same [`Provider`] adapter the
//! gateway uses, each answer shape-checked. The report is what the CLI
//! prints and the store records; a provider may be failed over to only
//! with a passing one (R9 in `docs/design.md`).

use std::time::Instant;

use intentgate_providers::{CallContext, ChatRequest, EmbeddingRequest, Provider};
use serde::Serialize;
use serde_json::{Map, json};
use uuid::Uuid;

use super::EmbeddingContract;
use super::render::{RenderedPrompt, TokenizerRef, check_case_through};
use super::shape::ShapeChecker;
use super::suite::{Case, Suite};
use super::tokenizer::Tokenizer;
use super::tools::Expect;

/// What a run reports while it goes, for a progress bar or plain lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Progress {
    CaseStarted {
        case: String,
        index: usize,
        total: usize,
    },
    /// One round trip done; `ok` when its answer kept the contract.
    RoundTrip {
        case: String,
        repeat: u32,
        repeats: u32,
        ok: bool,
    },
    CaseFinished {
        case: String,
        passed: bool,
        duration_ms: u64,
    },
}

/// One case's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseReport {
    pub case: String,
    pub passed: bool,
    /// Empty when it passed; otherwise every finding, rendering first.
    pub reasons: Vec<String>,
    pub duration_ms: u64,
    /// Round trips actually made (0 when the prompt could not render).
    pub repeats: u32,
}

/// One (route, provider) run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuiteReport {
    pub route: String,
    pub provider: String,
    pub suite_fingerprint: String,
    /// True only when every case passed.
    pub passed: bool,
    pub cases: Vec<CaseReport>,
    pub duration_ms: u64,
}

impl SuiteReport {
    /// The reasons of every failed case, each prefixed with its case.
    pub fn failures(&self) -> impl Iterator<Item = String> + '_ {
        self.cases
            .iter()
            .flat_map(|case| case.reasons.iter().map(move |reason| format!("{}: {reason}", case.case)))
    }
}

/// Runs every case of `suite` against `provider`. Never fails as a whole:
/// an unreachable provider is a failed case with its reason, which is what
/// the record must say.
pub async fn run_suite(
    suite: &Suite,
    checker: &ShapeChecker,
    provider: &Provider,
    tokenizer: Option<&Tokenizer>,
    context_window: Option<u32>,
    on_progress: &mut dyn FnMut(Progress),
) -> SuiteReport {
    let tokenizer = tokenizer.map(TokenizerRef::Local);
    run_suite_through(suite, checker, provider, tokenizer, context_window, on_progress).await
}

/// [`run_suite`] with the prompts checked through either kind of tokenizer:
/// a local one, or the provider's own (`tokenizer = "remote"`).
pub async fn run_suite_through(
    suite: &Suite,
    checker: &ShapeChecker,
    provider: &Provider,
    tokenizer: Option<TokenizerRef<'_>>,
    context_window: Option<u32>,
    on_progress: &mut dyn FnMut(Progress),
) -> SuiteReport {
    let started = Instant::now();
    let total = suite.cases().len();
    let mut cases = Vec::with_capacity(total);
    for (index, case) in suite.cases().iter().enumerate() {
        on_progress(Progress::CaseStarted { case: case.name.clone(), index, total });
        let report = run_case(suite, case, checker, provider, tokenizer, context_window, on_progress).await;
        on_progress(Progress::CaseFinished {
            case: report.case.clone(),
            passed: report.passed,
            duration_ms: report.duration_ms,
        });
        cases.push(report);
    }
    SuiteReport {
        route: suite.route().to_owned(),
        provider: provider.name().to_owned(),
        suite_fingerprint: suite.fingerprint().to_owned(),
        passed: cases.iter().all(|case| case.passed),
        cases,
        duration_ms: millis(started),
    }
}

async fn run_case(
    suite: &Suite,
    case: &Case,
    checker: &ShapeChecker,
    provider: &Provider,
    tokenizer: Option<TokenizerRef<'_>>,
    context_window: Option<u32>,
    on_progress: &mut dyn FnMut(Progress),
) -> CaseReport {
    let started = Instant::now();
    let rendering = check_case_through(suite, case, tokenizer, context_window).await;
    let mut reasons: Vec<String> =
        rendering.issues.iter().map(|issue| format!("rendering: {}: {}", issue.kind, issue.detail)).collect();
    let mut made = 0;
    // A prompt with a hole is not worth sending; other rendering issues
    // still fail the case, but the round trips show what else is wrong.
    if let Some(prompt) = &rendering.prompt {
        let request = request(suite, case, prompt);
        let expect = suite.expectation(case);
        for repeat in 1..=suite.repeats() {
            let found = match suite.embeddings() {
                Some(contract) => embedding_round_trip(&prompt.user, contract, provider).await,
                None => round_trip(&request, checker, &expect, provider).await,
            };
            made += 1;
            on_progress(Progress::RoundTrip {
                case: case.name.clone(),
                repeat,
                repeats: suite.repeats(),
                ok: found.is_empty(),
            });
            reasons.extend(
                found.into_iter().map(|reason| format!("repeat {repeat}/{}: {reason}", suite.repeats())),
            );
        }
    }
    CaseReport {
        case: case.name.clone(),
        passed: reasons.is_empty(),
        reasons,
        duration_ms: millis(started),
        repeats: made,
    }
}

/// The request a case sends: its messages at the suite's temperature and
/// `max_tokens`, with the schema as `response_format` when there is one and
/// the declared `tools` and `tool_choice` — what a well-behaved caller of
/// the route would send.
fn request(suite: &Suite, case: &Case, prompt: &RenderedPrompt) -> ChatRequest {
    let mut extra = Map::new();
    if let Some(schema) = suite.schema() {
        extra.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": format_name(suite.route()), "schema": schema}}),
        );
    }
    if !suite.tools().is_empty() {
        extra.insert("tools".into(), suite.tools().to_request());
    }
    if let Some(choice) = suite.tool_choice_of(case) {
        extra.insert("tool_choice".into(), choice.clone());
    }
    ChatRequest {
        messages: prompt.messages(),
        max_tokens: Some(suite.max_tokens()),
        temperature: Some(suite.temperature()),
        extra,
        ..ChatRequest::default()
    }
}

/// OpenAI accepts `[a-zA-Z0-9_-]{1,64}` as a schema name.
fn format_name(route: &str) -> String {
    let name: String =
        route.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(64).collect();
    if name.is_empty() { "contract".to_owned() } else { name }
}

/// One call; the reasons its answer breaks the contract (empty: kept).
/// `expect_json` stays off so the shape check, not the adapter, judges the
/// answer and says precisely why.
async fn round_trip(
    request: &ChatRequest,
    checker: &ShapeChecker,
    expect: &Expect,
    provider: &Provider,
) -> Vec<String> {
    let ctx = CallContext { job_id: Uuid::now_v7(), attempt: 1, expect_json: false, traceparent: None };
    let response = match provider.chat(request, &ctx).await {
        Ok(response) => response,
        Err(failure) => return vec![format!("{} ({failure})", failure.class())],
    };
    let mut reasons = match checker.check_answer(&response.completion, &response.text, expect) {
        Ok(()) => Vec::new(),
        Err(reasons) => reasons,
    };
    if response.finish_reason.as_deref() == Some("length") {
        reasons.push("the answer was cut at max_tokens (finish_reason length)".to_owned());
    }
    reasons
}

/// One embeddings call of the case's input (floats, no `dimensions`: the
/// provider's own), checked against the suite's [`EmbeddingContract`].
async fn embedding_round_trip(input: &str, contract: &EmbeddingContract, provider: &Provider) -> Vec<String> {
    if let Some(reason) = provider.cannot_embed() {
        return vec![reason];
    }
    let ctx = CallContext { job_id: Uuid::now_v7(), attempt: 1, expect_json: false, traceparent: None };
    let mut request = EmbeddingRequest { input: input.into(), ..EmbeddingRequest::default() };
    request.extra.insert("encoding_format".into(), "float".into());
    match provider.embed(&request, &ctx).await {
        Ok(response) => contract.check_run(&response.completion).err().unwrap_or_default(),
        Err(failure) => vec![format!("{} ({failure})", failure.class())],
    }
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_what_openai_accepts() {
        assert_eq!(format_name("extract"), "extract");
        assert_eq!(format_name("a.b/c d"), "a_b_c_d");
        assert_eq!(format_name(""), "contract");
        assert_eq!(format_name(&"x".repeat(80)).len(), 64);
    }

    #[test]
    fn the_request_carries_the_schema_and_settings() {
        let scratch = crate::contracts::testing::Scratch::new(r#"{"type": "object"}"#);
        let suite = scratch
            .suite(
                r#"
                route = "r"
                schema = "schemas/s.json"
                temperature = 0.1
                max_tokens = 99
                [prompt]
                system = "sys"
                user = "{{text}}"
                [[cases]]
                name = "c"
                vars = { text = "t" }
                "#,
            )
            .unwrap();
        let prompt = RenderedPrompt { system: Some("sys".into()), user: "t".into(), tokens: None };
        let body = serde_json::to_value(request(&suite, &suite.cases()[0], &prompt)).unwrap();
        assert_eq!(
            body,
            json!({
                "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "t"}],
                "max_tokens": 99, "temperature": 0.1,
                "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
            })
        );
    }

    #[test]
    fn the_request_offers_the_tools_and_the_answer_is_judged_by_its_calls() {
        let scratch = crate::contracts::testing::Scratch::new("{}");
        let suite = scratch
            .suite(
                r#"
                route = "t"
                tool_choice = { type = "function", function = { name = "get_weather" } }
                [prompt]
                user = "{{text}}"
                [rules]
                plain_text = true
                [[tools]]
                name = "get_weather"
                parameters = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
                [[cases]]
                name = "c"
                vars = { text = "t" }
                "#,
            )
            .unwrap();
        let prompt = RenderedPrompt { system: None, user: "t".into(), tokens: None };
        let body = serde_json::to_value(request(&suite, &suite.cases()[0], &prompt)).unwrap();
        assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(body["tool_choice"]["function"]["name"], "get_weather");
        let checker = ShapeChecker::new(&suite).unwrap();
        let expect = suite.expectation(&suite.cases()[0]);
        let call = |arguments: &str| {
            json!({"choices": [{"message": {"content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}}]})
        };
        assert_eq!(checker.check_answer(&call(r#"{"city": "x"}"#), "", &expect), Ok(()));
        assert_eq!(
            checker.check_answer(&call("{}"), "", &expect),
            Err(vec![
                r#"tool `get_weather`: arguments do not match its parameters: "city" is a required property"#
                    .to_owned()
            ])
        );
        let prose = json!({"choices": [{"message": {"content": "sunny"}}]});
        assert_eq!(
            checker.check_answer(&prose, "sunny", &expect),
            Err(vec!["expected a call of tool `get_weather`; the answer called no tool".to_owned()])
        );
        assert_eq!(checker.check_answer(&prose, "sunny", &Expect::Either), Ok(()));
        assert!(checker.check_answer(&prose, " ", &Expect::Either).is_err(), "prose still judged");
    }
}
