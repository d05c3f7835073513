//! Running suites against configured providers and recording the results:
//! what `intentgate contract run` (and `[contracts] run_on_start`) do.

use std::collections::HashMap;

use uuid::Uuid;

use super::{Progress, ShapeChecker, Suite, SuiteReport, Tokenizer, provider_fingerprint, run_suite};
use crate::config::{Config, ProviderConfig};
use crate::jobs::now_ms;
use crate::store::{CaseRecord, ContractRecord, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Suite(#[from] super::SuiteError),
    #[error(transparent)]
    Shape(#[from] super::ShapeError),
    #[error("provider `{0}`: {1}")]
    Provider(String, String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no (route, provider) pair matches: {0}")]
    NothingToRun(String),
}

/// The fingerprint of a provider's contract-relevant config.
pub fn fingerprint_of(provider: &ProviderConfig) -> String {
    let dialect = match provider.dialect {
        crate::config::DialectConfig::Openai => "openai",
        crate::config::DialectConfig::Anthropic => "anthropic",
    };
    provider_fingerprint(dialect, &provider.base_url, &provider.model, provider.tokenizer.as_deref())
}

/// Every (suite, provider) pair to run: each route's suite against each
/// provider of its chain, narrowed by `route` and `provider`.
pub fn pairs<'a>(
    config: &'a Config,
    suites: &'a [Suite],
    route: Option<&str>,
    provider: Option<&str>,
) -> Vec<(&'a Suite, &'a ProviderConfig)> {
    let by_route: HashMap<&str, &Suite> = suites.iter().map(|suite| (suite.route(), suite)).collect();
    let mut pairs = Vec::new();
    for config_route in &config.routes {
        if route.is_some_and(|r| r != config_route.name) {
            continue;
        }
        let Some(suite) = by_route.get(config_route.name.as_str()) else { continue };
        for name in &config_route.chain {
            if provider.is_some_and(|p| p != name) {
                continue;
            }
            if let Some(provider) = config.providers.iter().find(|p| &p.name == name) {
                pairs.push((*suite, provider));
            }
        }
    }
    pairs
}

/// Runs one suite against one provider through the adapter the gateway
/// uses, and records the result.
pub async fn run_and_record(
    store: &Store,
    suite: &Suite,
    provider_config: &ProviderConfig,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<SuiteReport, RunError> {
    let checker = ShapeChecker::new(suite)?;
    let built = provider_config
        .to_provider_config()
        .map_err(|err| RunError::Provider(provider_config.name.clone(), err.to_string()))
        .and_then(|config| {
            intentgate_providers::Provider::new(config)
                .map_err(|err| RunError::Provider(provider_config.name.clone(), err.to_string()))
        })?;
    let tokenizer = match provider_config.tokenizer.as_deref() {
        Some(spec) => Some(
            Tokenizer::from_spec(spec)
                .map_err(|err| RunError::Provider(provider_config.name.clone(), err.to_string()))?,
        ),
        None => None,
    };
    let started_at = now_ms();
    let report =
        run_suite(suite, &checker, &built, tokenizer.as_ref(), provider_config.context_window, on_progress)
            .await;
    let record = ContractRecord {
        id: Uuid::now_v7(),
        route: report.route.clone(),
        provider: report.provider.clone(),
        suite_fingerprint: suite.fingerprint().to_owned(),
        provider_fingerprint: fingerprint_of(provider_config),
        passed: report.passed,
        started_at,
        finished_at: now_ms().max(started_at),
        report: serde_json::to_string(&report).unwrap_or_default(),
    };
    let cases: Vec<CaseRecord<'_>> = report
        .cases
        .iter()
        .map(|case| CaseRecord {
            case_name: &case.case,
            passed: case.passed,
            reasons: serde_json::to_string(&case.reasons).unwrap_or_default(),
            duration_ms: i64::try_from(case.duration_ms).unwrap_or(i64::MAX),
            round_trips: i32::try_from(case.repeats).unwrap_or(i32::MAX),
        })
        .collect();
    store.record_contract_run(&record, &cases).await?;
    Ok(report)
}
