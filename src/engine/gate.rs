//! The failover gate (R9): a provider may serve a route only with a passing,
//! current contract record for the route's suite — fallbacks always, the
//! primary unless the route sets `require_contract_for_primary = false`.
//! Also the runtime half: on a route whose suite has a schema, every answer
//! passes the suite's shape checks before it may complete a job; on a route
//! whose suite declares tools, every tool call must name a tool the job's
//! request offered, with arguments its schema accepts (see [`Gate::offer`]).
//!
//! Records are read from the store and cached for a moment, so the hot path
//! costs a map lookup, not a query.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::config::{Config, RouteConfig};
use intentgate_providers::{ChatRequest, ChatResponse};

use crate::contracts::{Current, Eligibility, Offer, ShapeChecker, Suite, fingerprint_of, judge};
use crate::jobs::now_ms;
use crate::store::{ContractRecord, Store, StoreError};

/// How long cached records are trusted before they are read again.
const REFRESH: Duration = Duration::from_secs(2);

struct RouteContract {
    fingerprint: String,
    checker: ShapeChecker,
}

/// Per (route, provider): the latest record of each provider fingerprint,
/// oldest first.
type Records = HashMap<(String, String), Vec<ContractRecord>>;

pub struct Gate {
    routes: HashMap<String, RouteContract>,
    provider_fingerprints: HashMap<String, String>,
    records: RwLock<(i64, Records)>,
}

impl Gate {
    /// Loads the suites of `[contracts] dir`. A missing directory means no
    /// suites: routes that require contracts then serve nothing, loudly.
    pub fn load(config: &Config) -> Result<Gate, String> {
        let suites = if config.contracts.dir.is_dir() {
            Suite::load_dir(&config.contracts.dir).map_err(|err| err.to_string())?
        } else {
            tracing::warn!(dir = %config.contracts.dir.display(), "no contract suites directory");
            Vec::new()
        };
        let mut routes = HashMap::new();
        for suite in suites {
            let checker = ShapeChecker::new(&suite).map_err(|err| err.to_string())?;
            routes.insert(
                suite.route().to_owned(),
                RouteContract { fingerprint: suite.fingerprint().to_owned(), checker },
            );
        }
        for route in config.routes.iter().filter(|route| !routes.contains_key(&route.name)) {
            if let Some(effect) = without_suite(route) {
                tracing::warn!(route = %route.name, "route has no contract suite: {effect}");
            }
        }
        let provider_fingerprints =
            config.providers.iter().map(|p| (p.name.clone(), fingerprint_of(p))).collect();
        Ok(Gate { routes, provider_fingerprints, records: RwLock::new((i64::MIN, HashMap::new())) })
    }

    /// Re-reads the records if the cache is older than [`REFRESH`].
    pub async fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        let loaded_at = self.records.read().map(|r| r.0).unwrap_or(i64::MIN);
        if now_ms().saturating_sub(loaded_at) < i64::try_from(REFRESH.as_millis()).unwrap_or(0) {
            return Ok(());
        }
        self.reload(store).await
    }

    /// Re-reads the records now (after a contract run in this process).
    pub async fn reload(&self, store: &Store) -> Result<(), StoreError> {
        let mut records: Records = HashMap::new();
        for record in store.latest_contract_runs().await? {
            records.entry((record.route.clone(), record.provider.clone())).or_default().push(record);
        }
        if let Ok(mut cache) = self.records.write() {
            *cache = (now_ms(), records);
        }
        Ok(())
    }

    /// Whether `provider` may serve `route` at chain position `index`.
    /// `None`: the route does not ask (the gate is off for that position).
    pub fn check(&self, route: &RouteConfig, provider: &str, index: usize) -> Option<Eligibility> {
        // Every member of a pool in the first step is a primary.
        let required = if route.step(index).start == 0 {
            route.require_contract_for_primary
        } else {
            route.require_contract_for_fallback
        };
        required.then(|| self.verdict(route, provider))
    }

    /// The verdict whatever the route requires (for `GET /v1/routes`).
    pub fn verdict(&self, route: &RouteConfig, provider: &str) -> Eligibility {
        let contract = self.routes.get(&route.name);
        let current = Current {
            route: &route.name,
            provider,
            suite_fingerprint: contract.map(|c| c.fingerprint.as_str()),
            provider_fingerprint: self.provider_fingerprints.get(provider).map_or("", String::as_str),
            max_age: route.contract_max_age.into(),
            now_ms: now_ms(),
        };
        judge(&current, self.record(&route.name, provider).as_ref())
    }

    /// The record that speaks for `provider` on `route`: the latest run of
    /// its current fingerprint, else the latest run of any (which the judge
    /// then calls stale). Another replica's runs of another fingerprint
    /// never hide this one's.
    pub fn record(&self, route: &str, provider: &str) -> Option<ContractRecord> {
        let fingerprint = self.provider_fingerprints.get(provider).map_or("", String::as_str);
        let records = self.records.read().ok()?;
        let runs = records.1.get(&(route.to_owned(), provider.to_owned()))?;
        runs.iter().rev().find(|run| run.provider_fingerprint == fingerprint).or(runs.last()).cloned()
    }

    /// What a request on `route` offers in tools, for [`Gate::check_output`]
    /// to judge its answers by; `None` when the route's suite declares no
    /// tools (tool calls are then not the contract's business).
    ///
    /// The tools that count are the request's own: a client sends its own
    /// `tools`, and a call is right when it names one of those with
    /// arguments *its* schema accepts — the suite's declared tools only
    /// proved the provider can do that. Read here, from the request the
    /// attempt is about to send, and carried beside the call to whoever
    /// concludes it (the driver, the stream reader, the late listener), so
    /// that judging an answer needs no read of a store that may be down and
    /// no copy of the request kept anywhere else. A request tool the suite
    /// declares with the same parameters reuses its compiled schema.
    pub fn offer(&self, route: &str, request: &ChatRequest) -> Option<Arc<Offer>> {
        let contract = self.routes.get(route).filter(|c| !c.checker.tools().is_empty())?;
        Some(Arc::new(Offer::from_request(&request.extra, contract.checker.tools())))
    }

    /// R9 at runtime: the suite's shape checks on a live answer. Its tool
    /// calls, when `offer` is given (see [`Gate::offer`]), are checked
    /// against the request's tools and `tool_choice`; an answer without
    /// calls, on a route with a schema, against the schema and rules.
    /// `Err` lists what is wrong.
    pub fn check_output(
        &self,
        route: &str,
        response: &ChatResponse,
        offer: Option<&Offer>,
    ) -> Result<(), Vec<String>> {
        let Some(contract) = self.routes.get(route) else { return Ok(()) };
        if let Some(embeddings) = contract.checker.embeddings() {
            return embeddings.check_live(&response.completion).map(drop);
        }
        if let Some(offer) = offer
            && offer.tools.check(&response.completion, &offer.expect)?
        {
            return Ok(());
        }
        if contract.checker.expects_json() {
            contract.checker.check(&response.text).map(drop)
        } else {
            Ok(())
        }
    }
}

/// What a route without a suite will do, given what it requires: no record
/// can ever exist for it, so every position that requires one is refused.
/// `None` when it requires none (nothing to warn about).
fn without_suite(route: &RouteConfig) -> Option<&'static str> {
    let fallbacks = route.chain.len() > 1;
    match (route.require_contract_for_primary, route.require_contract_for_fallback && fallbacks) {
        (true, true) => Some("it requires contracts for every provider, so it will refuse them all"),
        (true, false) => Some("it requires a contract for its primary, so it will refuse its primary"),
        (false, true) => Some(
            "its primary serves, but it requires contracts for its fallbacks, so it will never fail over",
        ),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn route(primary: bool, fallback: bool, chain: &str) -> RouteConfig {
        let text = format!(
            "[store]\nurl = \"sqlite:x.db\"\n\
             [[providers]]\nname = \"a\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\n\
             [[providers]]\nname = \"b\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\n\
             [[routes]]\nname = \"r\"\nchain = {chain}\n\
             require_contract_for_primary = {primary}\nrequire_contract_for_fallback = {fallback}\n"
        );
        Config::from_toml(std::path::Path::new("t.toml"), &text).unwrap().routes.remove(0)
    }

    /// The warning for a route without a suite says what will happen, and
    /// is silent when nothing will be refused.
    #[test]
    fn a_route_without_a_suite_is_warned_about_truthfully() {
        assert_eq!(without_suite(&route(false, false, r#"["a", "b"]"#)), None);
        assert_eq!(without_suite(&route(false, true, r#"["a"]"#)), None, "no fallback to refuse");
        assert!(without_suite(&route(false, true, r#"["a", "b"]"#)).unwrap().contains("primary serves"));
        assert!(without_suite(&route(true, false, r#"["a", "b"]"#)).unwrap().contains("refuse its primary"));
        assert!(without_suite(&route(true, true, r#"["a", "b"]"#)).unwrap().contains("refuse them all"));
    }
}
