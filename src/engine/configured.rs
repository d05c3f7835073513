//! What the configuration file decides, built once per file and swapped
//! whole by a reload: the providers (their clients and API keys), the
//! routes, the contract gate, the budgets and rate limits, billing.
//!
//! A drive keeps the snapshot it started with to its end — a chain changed
//! by a reload applies to new jobs, never to a job half way through its
//! chain — and so do the tasks it starts (a late-answer listener, a hedged
//! attempt trailing). The snapshot travels as a task-local, set where those
//! tasks are spawned (`Engine::keep_config`); anything else (a request
//! creating a job, the sweep) reads the current one. What a reload cannot
//! change — the store, the listener, the lease settings — stays as it was
//! started (see `app::reload`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use intentgate_providers::{AnswerBudget, Provider, ProviderSettings};

use super::{EngineError, Gate, ProviderEntry};
use crate::config::{Config, RouteConfig};

/// One configuration file's providers, routes, gate and limits.
pub(super) struct Configured {
    pub providers: HashMap<String, Arc<ProviderEntry>>,
    pub routes: HashMap<String, Arc<RouteConfig>>,
    pub gate: Arc<Gate>,
    pub limits: crate::budgets::Limits,
    pub billing: crate::config::BillingConfig,
}

tokio::task_local! {
    /// The snapshot a drive started with, for it and the tasks it spawns.
    static DRIVE_CONFIG: Arc<Configured>;
}

impl Configured {
    /// Builds what `config` declares: each provider's client with its API
    /// key read from the environment, and the gate with its suites (its
    /// records are read from the store by the caller).
    pub fn build(config: &Config, answers: &AnswerBudget) -> Result<Configured, EngineError> {
        Ok(Configured {
            providers: build_providers(config, answers)?,
            routes: config.routes.iter().map(|route| (route.name.clone(), Arc::new(route.clone()))).collect(),
            gate: Arc::new(Gate::load(config).map_err(EngineError::Contracts)?),
            limits: config.limits(),
            billing: config.billing.clone(),
        })
    }

    /// The snapshot of the drive running on this task, if it is one.
    pub fn of_this_drive() -> Option<Arc<Configured>> {
        DRIVE_CONFIG.try_with(Arc::clone).ok()
    }

    /// Runs `work` with `snapshot` as its drive's configuration.
    pub fn scope<F: Future>(snapshot: Arc<Configured>, work: F) -> impl Future<Output = F::Output> {
        DRIVE_CONFIG.scope(snapshot, work)
    }
}

/// Every configured provider, built: its API key read from the environment,
/// its HTTP client constructed, and the gateway's answer budget shared.
fn build_providers(
    config: &Config,
    answers: &AnswerBudget,
) -> Result<HashMap<String, Arc<ProviderEntry>>, EngineError> {
    let mut providers = HashMap::new();
    for provider in &config.providers {
        let settings = ProviderSettings { answer_budget: answers.clone(), ..provider.to_settings()? };
        let built = Provider::new(settings)
            .map_err(|err| EngineError::Provider { name: provider.name.clone(), message: err.to_string() })?;
        let entry = ProviderEntry {
            provider: Arc::new(built),
            config: provider.clone(),
            prompt_counter: std::sync::OnceLock::new(),
            series: Arc::new(super::series::ProviderSeries::new(&provider.name)),
        };
        providers.insert(provider.name.clone(), Arc::new(entry));
    }
    Ok(providers)
}
