//! Budgets and rate limits in the engine: what a new job and each attempt
//! reserve before anything is sent, and what an attempt is charged.
//!
//! The arithmetic is [`crate::budgets`]; the rule of what a settled attempt
//! costs is [`crate::jobs::charge`]; booking is the store's, in the
//! transaction that writes the job or the attempt. Here the engine only
//! estimates a request's worst case: its prompt counted with the provider's
//! tokenizer (a vocabulary tiktoken carries), or, for providers that declare
//! none, its length in bytes (a byte-level BPE token is at least one byte,
//! so this is an upper bound), plus `max_tokens` (or `[billing]
//! default_max_tokens`) for each of its `n` choices.

use serde_json::Value;

use super::Engine;
use crate::budgets::{Hold, LimitRefusal, Usage};
use crate::contracts::Tokenizer;
use crate::jobs::{Amounts, Attempt, JobRequest};
use crate::store::Reservation;
use crate::telemetry;

/// How a provider's prompts are counted for reservations.
pub(super) enum PromptCounter {
    Tokens(Tokenizer),
    Bytes,
}

impl PromptCounter {
    pub(super) fn for_provider(tokenizer: Option<&str>) -> PromptCounter {
        match tokenizer.map(Tokenizer::from_spec) {
            Some(Ok(tokenizer)) => PromptCounter::Tokens(tokenizer),
            _ => PromptCounter::Bytes,
        }
    }

    fn count(&self, text: &str) -> u64 {
        let count = match self {
            PromptCounter::Tokens(tokenizer) => tokenizer.count(text),
            PromptCounter::Bytes => text.len(),
        };
        u64::try_from(count).unwrap_or(u64::MAX)
    }
}

impl Engine {
    /// The holds of a new job of `owner` on `route`: one request on each
    /// rate limit that counts requests.
    pub(super) fn job_holds(&self, owner: &str, route: &str) -> Vec<Hold> {
        self.inner.limits.job_holds(owner, route, self.now_ms())
    }

    /// What an attempt of a job (its owner and stored request) on
    /// `provider` reserves: its worst case, on every budget and token rate
    /// limit of the owner and route. Zero, and no holds, when nothing
    /// meters it and the provider has no price.
    pub(super) fn reservation(&self, owner: &str, request: &str, provider: &str) -> Reservation {
        let Ok(request) = serde_json::from_str::<JobRequest>(request) else {
            return Reservation::default();
        };
        let metered = self.inner.limits.meters_attempts(owner, &request.route);
        let entry = self.provider(provider);
        let price = entry.and_then(|entry| entry.config.price);
        if !metered && price.is_none() {
            return Reservation::default();
        }
        let prompt = serde_json::to_string(&request.input.messages).unwrap_or_default();
        let tools = request.params.get("tools").map(Value::to_string).unwrap_or_default();
        let counter = entry.map_or(&PromptCounter::Bytes, |entry| {
            // Built on first use: a vocabulary takes a while to build, and
            // only metered or priced attempts need one.
            entry
                .prompt_counter
                .get_or_init(|| PromptCounter::for_provider(entry.config.tokenizer.as_deref()))
        });
        let prompt_tokens = counter.count(&prompt).saturating_add(counter.count(&tools));
        let param = |name: &str| request.params.get(name).and_then(Value::as_u64);
        let max_tokens = param("max_completion_tokens")
            .or_else(|| param("max_tokens"))
            .unwrap_or(self.inner.billing.default_max_tokens);
        let completion_tokens = max_tokens.saturating_mul(param("n").unwrap_or(1).max(1));
        let amounts = Amounts {
            nanos: price.map_or(0, |price| price.worst_case_nanos(prompt_tokens, completion_tokens)),
            tokens: i64::try_from(prompt_tokens.saturating_add(completion_tokens)).unwrap_or(i64::MAX),
        };
        let holds = if metered {
            self.inner.limits.attempt_holds(owner, &request.route, amounts, self.now_ms())
        } else {
            Vec::new()
        };
        Reservation { amounts, holds }
    }

    /// What the usage a provider reported costs on that provider; `None`
    /// when it reported none.
    pub(super) fn measure(&self, provider: &str, usage: Option<&Value>) -> Option<Amounts> {
        let usage = Usage::from_openai(usage?)?;
        let price = self.provider(provider).and_then(|entry| entry.config.price);
        Some(Amounts {
            nanos: price.map_or(0, |price| price.cost_nanos(&usage)),
            tokens: usage.total_tokens(),
        })
    }

    /// Counts what a settled attempt was charged, once its write landed.
    pub(super) fn record_charge(&self, attempt: &Attempt, charged: Option<crate::jobs::Amounts>) {
        if let Some(nanos) = charged.map(|c| c.nanos).filter(|nanos| *nanos > 0) {
            metrics::counter!(telemetry::SPEND, "provider" => attempt.provider.clone())
                .increment(u64::try_from(nanos).unwrap_or(0));
        }
    }

    /// Counts and logs a refusal by a budget or rate limit.
    pub(super) fn record_refusal(&self, owner: &str, route: &str, refusal: &LimitRefusal) {
        let kind = if refusal.is_budget() { "budget" } else { "rate" };
        metrics::counter!(telemetry::LIMIT_REFUSALS, "kind" => kind).increment(1);
        tracing::info!(owner, route, %refusal, "refused by a {kind} limit");
    }
}

/// One meter of an owner, as it stands in its current window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterUsage {
    pub kind: crate::budgets::LimitKind,
    pub meter: String,
    /// `1h`, `1d`, `30d`, `month`; `1m` for rate limits.
    pub window: &'static str,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub limit: i64,
    /// Charged to settled attempts (requests: counted) in this window.
    pub used: i64,
    /// Reserved by attempts still open.
    pub held: i64,
}

impl Engine {
    /// Every budget and rate limit that applies to `owner`, with what it
    /// has used and holds in its current window, for `GET /v1/usage` and
    /// `intentgate usage`.
    pub async fn usage(&self, owner: &str) -> Result<Vec<MeterUsage>, crate::store::StoreError> {
        use crate::budgets::{LimitKind, Window};
        let now = self.now_ms();
        let limits = &self.inner.limits;
        let mut meters: Vec<(LimitKind, String, i64, Window)> = Vec::new();
        for route in self.inner.routes.keys() {
            for (meter, limit, window) in limits.budget_meters(owner, route) {
                meters.push((LimitKind::Budget, meter, limit, window));
            }
            for kind in [LimitKind::Requests, LimitKind::Tokens] {
                for (meter, limit) in limits.rate_meters(owner, route, kind) {
                    meters.push((kind, meter, limit, Window::Minute));
                }
            }
        }
        meters.sort_by(|a, b| a.1.cmp(&b.1));
        meters.dedup_by(|a, b| a.1 == b.1);
        let mut usage = Vec::with_capacity(meters.len());
        for (kind, meter, limit, window) in meters {
            let (window_start_ms, window_end_ms) = window.bounds(now);
            let (used, held) = self.store().meter(&meter, window_start_ms).await?;
            usage.push(MeterUsage {
                kind,
                meter,
                window: window.as_str(),
                window_start_ms,
                window_end_ms,
                limit,
                used,
                held,
            });
        }
        Ok(usage)
    }

    /// `[billing] currency`.
    pub fn currency(&self) -> &str {
        &self.inner.billing.currency
    }
}
