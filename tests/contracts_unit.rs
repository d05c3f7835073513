//! The contract suites end to end: the shipped suites load and render
//! cleanly through both tokenizers, and running them over a real loopback
//! simulator passes a provider that keeps the contract and fails the ones
//! that invent keys or ignore the format — naming why — in every dialect.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use intentgate::contracts::{
    Progress, ShapeChecker, Suite, SuiteReport, Tokenizer, check_suite, provider_fingerprint, run_suite,
};
use intentgate_providers::sim::{SimHandle, Simulator};
use intentgate_providers::{Dialect, Provider, ProviderSettings};

const SUITES: &str = "contract-tests";

fn shipped() -> Vec<Suite> {
    Suite::load_dir(Path::new(SUITES)).unwrap()
}

fn shipped_suite(route: &str) -> Suite {
    shipped().into_iter().find(|suite| suite.route() == route).unwrap()
}

async fn sim() -> SimHandle {
    Simulator::new(1).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// Every dialect the suites must be runnable against.
const DIALECTS: [Dialect; 6] = [
    Dialect::OpenAi,
    Dialect::Anthropic,
    Dialect::Gemini,
    Dialect::Bedrock,
    Dialect::BedrockConverse,
    Dialect::OpenAiResponses,
];

fn provider(sim: &SimHandle, dialect: Dialect, model: &str) -> Provider {
    let base_url = match dialect {
        Dialect::OpenAi | Dialect::OpenAiResponses => sim.base_url_openai(),
        Dialect::Anthropic => sim.base_url_anthropic(),
        Dialect::Gemini => sim.base_url_gemini(),
        Dialect::Bedrock | Dialect::BedrockConverse => sim.base_url_bedrock(),
    };
    let mut settings = ProviderSettings::new(&format!("sim-{model}"), dialect, &base_url, model);
    if dialect == Dialect::Gemini {
        // Gemini's API (and so the simulator's) refuses a call without a key.
        settings.api_key = Some(intentgate_providers::Secret::new("gemini-contract-key"));
    }
    if matches!(dialect, Dialect::Bedrock | Dialect::BedrockConverse) {
        // The simulator's Bedrock API key (no signing needed here).
        settings.api_key =
            Some(intentgate_providers::Secret::new(intentgate_providers::sim::BEDROCK_API_KEY));
        settings.bedrock =
            Some(intentgate_providers::BedrockAddress { region: "us-east-1".into(), credentials: None });
    }
    Provider::new(settings).unwrap()
}

async fn run(
    suite: &Suite,
    provider: &Provider,
    tokenizer: Option<&Tokenizer>,
) -> (SuiteReport, Vec<Progress>) {
    let checker = ShapeChecker::new(suite).unwrap();
    let mut events = Vec::new();
    let report =
        run_suite(suite, &checker, provider, tokenizer, Some(128_000), &mut |event| events.push(event)).await;
    (report, events)
}

fn o200k() -> Tokenizer {
    Tokenizer::from_spec("o200k_base").unwrap()
}

#[test]
fn the_shipped_suites_cover_the_default_routes() {
    let suites = shipped();
    let routes: Vec<&str> = suites.iter().map(Suite::route).collect();
    assert_eq!(routes, ["chat", "claude", "codex", "embeddings", "extract", "tools"]);
    let config = std::fs::read_to_string("config/gateway.toml").unwrap();
    for suite in &suites {
        assert!(
            config.contains(&format!("name = \"{}\"", suite.route())),
            "{} is a default route",
            suite.route()
        );
        assert!(suite.cases().len() >= 5, "{} has {} cases", suite.route(), suite.cases().len());
        assert!(suite.temperature() <= 0.2);
        assert!(suite.repeats() >= 2);
    }
    assert!(shipped_suite("extract").expects_json());
    assert!(!shipped_suite("chat").expects_json());
}

#[test]
fn the_shipped_cases_expose_the_known_failure_modes() {
    for suite in shipped() {
        let inputs: Vec<&str> =
            suite.cases().iter().flat_map(|case| case.vars.values()).map(String::as_str).collect();
        let any = |test: &dyn Fn(&str) -> bool| inputs.iter().any(|input| test(input));
        assert!(any(&|s| s.len() > 1500), "{}: a long input", suite.route());
        assert!(any(&|s| s.chars().any(|c| c as u32 > 0x2E80)), "{}: a CJK input", suite.route());
        assert!(any(&|s| s.contains("\": ") && s.contains('{')), "{}: an input with JSON", suite.route());
        assert!(any(&|s| s.contains("{{")), "{}: an input with template braces", suite.route());
        assert!(any(&|s| s.to_lowercase().contains("ignore")), "{}: a prompt injection", suite.route());
    }
}

#[test]
fn the_shipped_suites_render_cleanly_through_both_tokenizers() {
    for spec in ["o200k_base", "cl100k_base"] {
        let tokenizer = Tokenizer::from_spec(spec).unwrap();
        for suite in shipped() {
            let issues = check_suite(&suite, Some(&tokenizer), Some(8192));
            assert!(issues.is_empty(), "{} through {spec}: {issues:?}", suite.route());
            let tight = check_suite(&suite, Some(&tokenizer), Some(1024));
            assert!(
                tight.iter().any(|issue| issue.case == "long-thread" || issue.case == "long-message"),
                "{}: the long case does not fit 1024 tokens through {spec}: {tight:?}",
                suite.route()
            );
        }
    }
}

#[test]
fn fingerprints_are_stable_across_loads_and_distinct_per_suite() {
    let first: Vec<String> = shipped().iter().map(|s| s.fingerprint().to_owned()).collect();
    let second: Vec<String> = shipped().iter().map(|s| s.fingerprint().to_owned()).collect();
    assert_eq!(first, second);
    assert_ne!(first[0], first[1]);
    let a = provider_fingerprint("openai", "http://127.0.0.1:9101/v1", "sim:ok", Some("o200k_base"));
    let b = provider_fingerprint("openai", "http://127.0.0.1:9101/v1", "sim:invent-key", Some("o200k_base"));
    assert_ne!(a, b);
}

#[tokio::test]
async fn a_provider_that_keeps_the_contract_passes_every_dialect() {
    let sim = sim().await;
    // Only the OpenAI dialect has embeddings (see the embeddings test below).
    let chat_suites = || shipped().into_iter().filter(|suite| suite.embeddings().is_none());
    for dialect in DIALECTS {
        for suite in chat_suites() {
            // Keeping a tools suite's contract means calling the tool.
            let model = if suite.tools().is_empty() { "sim:ok" } else { "sim:tool_call" };
            let provider = provider(&sim, dialect, model);
            let (report, events) = run(&suite, &provider, Some(&o200k())).await;
            let failures: Vec<String> = report.failures().collect();
            assert!(report.passed, "{} over {dialect}: {failures:?}", suite.route());
            assert_eq!(report.route, suite.route());
            assert_eq!(report.suite_fingerprint, suite.fingerprint());
            assert_eq!(report.cases.len(), suite.cases().len());
            assert!(
                report.cases.iter().all(|case| case.repeats == suite.repeats() && case.reasons.is_empty())
            );
            let round_trips =
                events.iter().filter(|e| matches!(e, Progress::RoundTrip { ok: true, .. })).count();
            assert_eq!(round_trips, suite.cases().len() * suite.repeats() as usize);
            assert!(matches!(events.first(), Some(Progress::CaseStarted { index: 0, .. })));
            assert!(matches!(events.last(), Some(Progress::CaseFinished { passed: true, .. })));
        }
    }
    let expected: usize = chat_suites().map(|s| s.cases().len() * s.repeats() as usize).sum();
    assert_eq!(sim.calls().total, DIALECTS.len() as u64 * expected as u64);
    let gemini = sim.calls().by_path.into_iter().filter(|(path, _)| path.starts_with("/v1beta/models/"));
    assert_eq!(gemini.map(|(_, n)| n).sum::<u64>(), expected as u64, "Gemini's calls at its model's path");
}

#[tokio::test]
async fn a_provider_that_invents_a_key_fails_naming_the_key() {
    let sim = sim().await;
    let provider = provider(&sim, Dialect::OpenAi, "sim:invent-key");
    let suite = shipped_suite("extract");
    let (report, _) = run(&suite, &provider, Some(&o200k())).await;
    assert!(!report.passed);
    for case in &report.cases {
        assert!(!case.passed, "{}", case.case);
        assert!(
            case.reasons
                .iter()
                .any(|r| r.contains("top-level key `invented_") && r.contains("is not allowed")),
            "{}: {:?}",
            case.case,
            case.reasons
        );
        assert!(case.reasons.iter().all(|r| r.starts_with("repeat ")), "{:?}", case.reasons);
    }
    // On the prose route its JSON wrapper breaks the contract too.
    let (report, _) = run(&shipped_suite("chat"), &provider, Some(&o200k())).await;
    assert!(!report.passed);
    assert!(report.failures().all(|r| r.contains("a JSON object where prose was asked for")));
}

#[tokio::test]
async fn a_provider_that_ignores_the_format_fails() {
    let sim = sim().await;
    let provider = provider(&sim, Dialect::Anthropic, "sim:ignore-format");
    let (report, _) = run(&shipped_suite("extract"), &provider, Some(&o200k())).await;
    assert!(!report.passed);
    assert!(report.cases.iter().all(|case| !case.passed));
    assert!(
        report.failures().all(|r| r.contains("not JSON (")),
        "{:?}",
        report.failures().collect::<Vec<_>>()
    );
}

/// Every dialect: a tool called with arguments its schema refuses, a tool
/// nobody offered, and prose where the tool was expected each fail every
/// case, saying which tool and what is wrong.
#[tokio::test]
async fn a_provider_that_breaks_the_tool_contract_fails_naming_the_tool() {
    let sim = sim().await;
    let suite = shipped_suite("tools");
    for dialect in DIALECTS {
        let cases = [
            (
                "sim:tool_args=bad",
                r#"tool `get_weather`: arguments do not match its parameters: "city" is a required property"#,
            ),
            (
                "sim:tool=delete_account",
                "tool `delete_account` was called but not offered (offered: get_weather)",
            ),
            ("sim:ignore-tools", "expected a call of tool `get_weather`; the answer called no tool"),
        ];
        for (model, reason) in cases {
            let (report, _) = run(&suite, &provider(&sim, dialect, model), Some(&o200k())).await;
            assert!(report.cases.iter().all(|case| !case.passed), "{model} over {dialect}");
            let first = &report.cases[0].reasons;
            assert!(first.contains(&format!("repeat 1/2: {reason}")), "{model} over {dialect}: {first:?}");
        }
    }
}

#[tokio::test]
async fn no_tokenizer_fails_every_case_but_still_makes_the_round_trips() {
    let sim = sim().await;
    let provider = provider(&sim, Dialect::OpenAi, "sim:ok");
    let suite = shipped_suite("extract");
    let (report, _) = run(&suite, &provider, None).await;
    assert!(!report.passed);
    for case in &report.cases {
        assert_eq!(case.repeats, suite.repeats());
        assert_eq!(case.reasons.len(), 1, "{:?}", case.reasons);
        assert!(case.reasons[0].starts_with("rendering: no_tokenizer:"), "{:?}", case.reasons);
    }
}

#[tokio::test]
async fn an_unresolved_placeholder_fails_its_case_without_a_call() {
    let sim = sim().await;
    let provider = provider(&sim, Dialect::OpenAi, "sim:ok");
    let path = Path::new(SUITES).join("chat.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("user = \"{{text}}\"", "user = \"{{text}} {{shop}}\"");
    let suite = Suite::from_toml(&path, &text).unwrap();
    let (report, _) = run(&suite, &provider, Some(&o200k())).await;
    assert!(!report.passed);
    for case in &report.cases {
        assert_eq!(case.repeats, 0);
        assert_eq!(case.reasons.len(), 1);
        assert!(case.reasons[0].contains("unresolved_placeholder: `{{shop}}`"), "{:?}", case.reasons);
    }
    assert_eq!(sim.calls().total, 0);
}

#[tokio::test]
async fn an_unreachable_provider_fails_with_the_outcome_class() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let config = ProviderSettings::new("gone", Dialect::OpenAi, &format!("http://{addr}/v1"), "m");
    let provider = Provider::new(config).unwrap();
    let (report, _) = run(&shipped_suite("chat"), &provider, Some(&o200k())).await;
    assert!(!report.passed);
    assert!(
        report.failures().all(|r| r.contains("not_sent (")),
        "{:?}",
        report.failures().collect::<Vec<_>>()
    );
}

/// The embeddings suite passes a provider that answers unit vectors of the
/// declared dimension, and fails — naming why — one that answers another
/// dimension (another model, in effect) and one whose dialect has none.
#[tokio::test]
async fn the_embeddings_suite_passes_only_a_provider_of_the_declared_vectors() {
    let sim = sim().await;
    let suite = shipped_suite("embeddings");
    let (report, _) = run(&suite, &provider(&sim, Dialect::OpenAi, "sim:ok"), Some(&o200k())).await;
    assert!(report.passed, "{:?}", report.failures().collect::<Vec<_>>());

    let mut settings = ProviderSettings::new("sim-8", Dialect::OpenAi, &sim.base_url_openai(), "sim:ok");
    settings.request_overrides.insert("dimensions".into(), 8.into());
    let (report, _) = run(&suite, &Provider::new(settings).unwrap(), Some(&o200k())).await;
    let failures: Vec<String> = report.failures().collect();
    assert!(
        !report.passed && failures[0].contains("vectors of 8 dimensions, the suite declares 16"),
        "{failures:?}"
    );

    let (report, _) = run(&suite, &provider(&sim, Dialect::Anthropic, "sim:ok"), Some(&o200k())).await;
    let failures: Vec<String> = report.failures().collect();
    assert!(!report.passed && failures[0].contains("the Anthropic API has no embeddings"), "{failures:?}");
    assert_eq!(
        sim.calls().by_path.get("/v1/embeddings"),
        Some(&24),
        "6 cases, twice, on two OpenAI providers"
    );
}

/// The suites run against an Azure deployment like against any OpenAI-dialect
/// provider: the same adapter, at the deployment's address.
#[tokio::test]
async fn the_suites_run_against_an_azure_deployment() {
    let sim = sim().await;
    let mut settings = ProviderSettings::new("azure", Dialect::OpenAi, &sim.base_url_anthropic(), "sim:ok");
    settings.azure = Some(intentgate_providers::AzureAddress {
        deployment: "gpt-4o-mini-prod".into(),
        api_version: "2024-10-21".into(),
    });
    let provider = Provider::new(settings).unwrap();
    for route in ["chat", "embeddings"] {
        let (report, _) = run(&shipped_suite(route), &provider, Some(&o200k())).await;
        assert!(report.passed, "{route}: {:?}", report.failures().collect::<Vec<_>>());
    }
    let paths: Vec<String> = sim.calls().by_path.keys().cloned().collect();
    assert_eq!(
        paths,
        [
            "/openai/deployments/gpt-4o-mini-prod/chat/completions",
            "/openai/deployments/gpt-4o-mini-prod/embeddings"
        ]
    );
}

/// A Gemini provider fails the suites as the others do, naming why: the
/// key it invents, the format it ignores, and the embeddings its dialect
/// does not translate (which is never sent).
#[tokio::test]
async fn a_gemini_provider_that_breaks_the_contract_fails_naming_why() {
    let sim = sim().await;
    let (report, _) =
        run(&shipped_suite("extract"), &provider(&sim, Dialect::Gemini, "sim:invent-key"), Some(&o200k()))
            .await;
    assert!(!report.passed);
    for case in &report.cases {
        let named = case
            .reasons
            .iter()
            .any(|r| r.contains("top-level key `invented_") && r.contains("is not allowed"));
        assert!(!case.passed && named, "{}: {:?}", case.case, case.reasons);
    }
    let (report, _) =
        run(&shipped_suite("extract"), &provider(&sim, Dialect::Gemini, "sim:ignore-format"), Some(&o200k()))
            .await;
    assert!(!report.passed && report.failures().all(|r| r.contains("not JSON (")));
    let before = sim.calls().total;
    let (report, _) =
        run(&shipped_suite("embeddings"), &provider(&sim, Dialect::Gemini, "sim:ok"), Some(&o200k())).await;
    let failures: Vec<String> = report.failures().collect();
    assert!(
        !report.passed && failures[0].contains("Gemini's embedContent is not translated"),
        "{failures:?}"
    );
    assert_eq!(sim.calls().total, before, "nothing sent");
}
