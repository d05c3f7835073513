//! Running suites against configured providers: which (suite, provider)
//! pairs there are, and one pair's run through the adapter the gateway
//! uses. Recording a run is `crate::contract_runs`' (this module touches no
//! storage).

use std::collections::HashMap;

use intentgate_providers::RemoteTokenizer;

use super::{
    Progress, ShapeChecker, Suite, SuiteReport, Tokenizer, TokenizerRef, provider_fingerprint_with,
    run_suite_through,
};
use crate::config::{Config, ProviderConfig, REMOTE_TOKENIZER};
use crate::jobs::now_ms;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Suite(#[from] super::SuiteError),
    #[error(transparent)]
    Shape(#[from] super::ShapeError),
    #[error("provider `{0}`: {1}")]
    Provider(String, String),
    #[error("no (route, provider) pair matches: {0}")]
    NothingToRun(String),
}

/// The fingerprint of a provider's contract-relevant config.
pub fn fingerprint_of(provider: &ProviderConfig) -> String {
    let dialect = provider.dialect.as_str();
    let mut options = serde_json::Map::new();
    if let Some(deployment) = &provider.deployment {
        options.insert("deployment".into(), deployment.clone().into());
    }
    if let Some(version) = &provider.api_version {
        options.insert("api_version".into(), version.clone().into());
    }
    if let Some(region) = &provider.region {
        options.insert("region".into(), region.clone().into());
    }
    if !provider.request.is_empty() {
        options.insert("request".into(), serde_json::Value::Object(provider.request.clone()));
    }
    if let Some(cap) = provider.max_temperature {
        options.insert("max_temperature".into(), cap.into());
    }
    if provider.null_content_as_empty {
        options.insert("null_content_as_empty".into(), true.into());
    }
    if let Some(format) = &provider.chat_format {
        options.insert("chat_format".into(), format.clone().into());
    }
    if provider.tokenizer.as_deref() == Some(REMOTE_TOKENIZER) {
        options.insert("tokenize_path".into(), provider.tokenize_path().into());
        options.insert("detokenize_path".into(), provider.detokenize_path().into());
    }
    if provider.dialect == crate::config::DialectConfig::Vertex {
        for (field, value) in [("project", &provider.project), ("location", &provider.location)] {
            options.insert(field.into(), value.clone().unwrap_or_default().into());
        }
        options
            .insert("publisher".into(), provider.publisher().map(|p| p.as_str()).unwrap_or_default().into());
    }
    provider_fingerprint_with(
        dialect,
        &provider.endpoint_url(),
        &provider.model,
        provider.tokenizer.as_deref(),
        &options,
    )
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

/// One suite's run against one provider, with what a record of it needs.
#[derive(Debug)]
pub struct FinishedRun {
    pub report: SuiteReport,
    pub suite_fingerprint: String,
    pub provider_fingerprint: String,
    /// Unix milliseconds.
    pub started_at: i64,
    pub finished_at: i64,
}

/// Runs one suite against one provider through the adapter the gateway uses.
pub async fn run_pair(
    suite: &Suite,
    provider_config: &ProviderConfig,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<FinishedRun, RunError> {
    let checker = ShapeChecker::new(suite)?;
    let provider_error =
        |err: &dyn std::fmt::Display| RunError::Provider(provider_config.name.clone(), err.to_string());
    let settings = provider_config.to_settings().map_err(|err| provider_error(&err))?;
    let (local, remote) = match provider_config.tokenizer.as_deref() {
        Some(REMOTE_TOKENIZER) => {
            let paths = (provider_config.tokenize_path(), provider_config.detokenize_path());
            (
                None,
                Some(RemoteTokenizer::new(&settings, paths.0, paths.1).map_err(|err| provider_error(&err))?),
            )
        }
        Some(spec) => (Some(Tokenizer::from_spec(spec).map_err(|err| provider_error(&err))?), None),
        None => (None, None),
    };
    let tokenizer = match (&local, &remote) {
        (Some(local), _) => Some(TokenizerRef::Local(local)),
        (_, Some(remote)) => Some(TokenizerRef::Remote(remote)),
        _ => None,
    };
    let built = intentgate_providers::Provider::new(settings).map_err(|err| provider_error(&err))?;
    let started_at = now_ms();
    let report =
        run_suite_through(suite, &checker, &built, tokenizer, provider_config.context_window, on_progress)
            .await;
    Ok(FinishedRun {
        report,
        suite_fingerprint: suite.fingerprint().to_owned(),
        provider_fingerprint: fingerprint_of(provider_config),
        started_at,
        finished_at: now_ms().max(started_at),
    })
}
