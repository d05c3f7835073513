//! Budgets and rate limits in the engine: what a new job and each attempt
//! reserve before anything is sent, and what an attempt is charged.
//!
//! The arithmetic is [`crate::budgets`]; the rule of what a settled attempt
//! costs is [`crate::jobs::charge`]; booking is the store's, in the
//! transaction that writes the job or the attempt. Here the engine only
//! estimates a request's worst case from the body the provider is sent:
//! the whole body counted with the provider's tokenizer (a vocabulary
//! tiktoken carries), or, for providers that declare none, its length in
//! bytes (a byte-level BPE token is at least one byte, so this is an upper
//! bound), plus the body's completion limit for each of its `n` choices.
//! A reserving attempt always carries a completion limit (`outgoing.rs`).

use intentgate_providers::Rendered;
use serde_json::Value;

use super::{Engine, PreparedRequest, Work};

use crate::budgets::{LimitRefusal, TokenUsage, merge_holds, stored_holds};
use crate::contracts::Tokenizer;
use crate::jobs::{Amounts, Attempt, Payer};
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
    /// Whether an attempt of `payer` on `route` sent to `provider` reserves
    /// anything: a limit meters it or the provider has a price.
    pub(super) fn reserves(&self, payer: Payer<'_>, route: &str, provider: &str) -> bool {
        self.meters(payer, route) || self.provider(provider).is_some_and(|entry| entry.config.price.is_some())
    }

    /// Whether a configured or a stored limit meters an attempt of `payer`
    /// on `route`.
    fn meters(&self, payer: Payer<'_>, route: &str) -> bool {
        self.configured().limits.meters_attempts(payer.owner, route)
            || self.spend_limits().iter().any(|limit| limit.applies(payer, route))
    }

    /// The holds of an attempt of `payer` on `route` that reserves
    /// `amounts`: the config's rules and the stored limits, one per meter.
    fn holds(&self, payer: Payer<'_>, route: &str, amounts: Amounts) -> Vec<crate::budgets::Hold> {
        let now = self.now_ms();
        let mut holds = self.configured().limits.attempt_holds(payer.owner, route, amounts, now);
        holds.extend(stored_holds(&self.spend_limits(), payer, route, amounts, now));
        merge_holds(holds)
    }

    /// What an attempt of a job (its payer and stored request) sending
    /// `body` to the provider of `entry` reserves: its worst case, on every
    /// budget and rate limit of its owner, key, team, tags and route.
    ///
    /// The worst case is read off the body the provider is sent (see
    /// `outgoing.rs`): every field that reaches it is counted as prompt
    /// (`prompt_tokens`: messages, tools, legacy `functions`, a translated
    /// `system`, request overrides), and its completion limit is the one in
    /// that body, whichever field the dialect carries it in, once per choice.
    pub(super) fn reservation(
        &self,
        payer: Payer<'_>,
        request: &PreparedRequest,
        entry: &super::ProviderEntry,
        body: &Rendered,
        prompt_tokens: u64,
    ) -> Reservation {
        let completion_tokens = match request.work {
            Work::Embed(_) => 0,
            Work::Chat(_) => {
                let body = body.json();
                let limit = completion_limit(body).unwrap_or(self.configured().billing.default_max_tokens);
                limit.saturating_mul(choices(body))
            }
        };
        let price = entry.config.price;
        let amounts = Amounts {
            nanos: price.map_or(0, |price| price.worst_case_nanos(prompt_tokens, completion_tokens)),
            tokens: i64::try_from(prompt_tokens.saturating_add(completion_tokens)).unwrap_or(i64::MAX),
        };
        let holds = self.holds(payer, &request.route, amounts);
        Reservation { amounts, holds }
    }

    /// The prompt tokens `request` would be sent as to the provider of
    /// `entry`, as that provider counts them (its tokenizer over the whole
    /// rendered body, or its bytes): an upper bound, for clients that ask
    /// before they send ([`Engine::count_prompt_tokens`]). `None` when the
    /// request cannot be rendered for it. Blocking CPU work.
    pub(super) fn count_with(entry: &super::ProviderEntry, request: &PreparedRequest) -> Option<u64> {
        let body = request.work.render(&entry.provider, false).ok()?;
        Some(Self::prompt_tokens(entry, &body))
    }

    /// The prompt tokens of `body` (a rendered provider body) as `entry`
    /// counts them: an upper bound (the whole body, JSON included).
    pub(super) fn prompt_tokens(entry: &super::ProviderEntry, body: &Rendered) -> u64 {
        // Built on first use: a vocabulary takes a while to build, and only
        // metered, priced or windowed providers need one.
        let counter = entry
            .prompt_counter
            .get_or_init(|| PromptCounter::for_provider(entry.config.tokenizer.as_deref()));
        counter.count(body.text())
    }

    /// Why `provider`'s `context_window` cannot hold this request (its
    /// prompt plus the completion limit its client set), if it cannot:
    /// such a provider is passed over before anything is sent, where it
    /// would only answer `context_length_exceeded`. Counted with the
    /// provider's tokenizer, or in bytes without one (an upper bound: a
    /// provider may be passed over that could have served).
    pub(super) fn context_refusal(&self, request: &PreparedRequest, provider: &str) -> Option<String> {
        let entry = self.provider(provider)?;
        let window = u64::from(entry.config.context_window?);
        let completion = request.completion_limit().unwrap_or(0);
        let body = request.work.render(&entry.provider, false).ok()?;
        let prompt = Self::prompt_tokens(&entry, &body);
        (prompt.saturating_add(completion) > window).then(|| {
            format!(
                "its context_window of {window} tokens cannot hold this request ({prompt} prompt tokens at \
                 most, plus {completion} to complete)"
            )
        })
    }

    /// What the usage a provider reported costs on that provider; `None`
    /// when it reported none.
    pub(super) fn measure(&self, provider: &str, usage: Option<&Value>) -> Option<Amounts> {
        let usage = TokenUsage::from_openai(usage?)?;
        let price = self.provider(provider).and_then(|entry| entry.config.price);
        Some(Amounts {
            nanos: price.map_or(0, |price| price.cost_nanos(&usage)),
            tokens: usage.total_tokens(),
        })
    }

    /// Counts what a settled attempt was charged, once its write landed.
    pub(super) fn record_charge(&self, attempt: &Attempt, charged: Option<crate::jobs::Amounts>) {
        if let Some(nanos) = charged.map(|c| c.nanos).filter(|nanos| *nanos > 0) {
            self.series(&attempt.provider).spend.increment(u64::try_from(nanos).unwrap_or(0));
        }
    }

    /// Counts and logs a provider's report beyond what its attempt
    /// reserved: charged the reservation (see `crate::jobs::charge`), kept
    /// as reported in the answer.
    pub(super) fn record_over_reservation(
        &self,
        attempt: &Attempt,
        measured: Option<Amounts>,
        charged: Amounts,
    ) {
        let Some(measured) = measured.filter(|measured| *measured != charged) else { return };
        metrics::counter!(telemetry::USAGE_OVER_RESERVATION, "provider" => attempt.provider.clone())
            .increment(1);
        tracing::warn!(
            job_id = %attempt.job_id,
            attempt = attempt.number,
            provider = %attempt.provider,
            reported_tokens = measured.tokens,
            reserved_tokens = attempt.reserved.tokens,
            "the provider reported more usage than the request allowed: charged its reservation"
        );
    }

    /// Counts and logs a refusal by a budget or rate limit.
    pub(super) fn record_refusal(&self, owner: &str, route: &str, refusal: &LimitRefusal) {
        let kind = if refusal.is_budget() { "budget" } else { "rate" };
        metrics::counter!(telemetry::LIMIT_REFUSALS, "kind" => kind).increment(1);
        tracing::info!(owner, route, %refusal, "refused by a {kind} limit");
    }
}

/// The completion limit of a rendered body, whichever field its dialect
/// carries it in (chat's `max_completion_tokens` or `max_tokens`, the
/// Responses API's `max_output_tokens`, Gemini's
/// `generationConfig.maxOutputTokens`): the largest, as a provider may read
/// any. Thinking and reasoning are spent within it.
fn completion_limit(body: &Value) -> Option<u64> {
    ["/max_completion_tokens", "/max_tokens", "/max_output_tokens", "/generationConfig/maxOutputTokens"]
        .iter()
        .filter_map(|pointer| body.pointer(pointer).and_then(Value::as_u64))
        .max()
}

/// How many answers a rendered body asks for, each up to the completion
/// limit: chat's `n`, Gemini's `generationConfig.candidateCount`.
fn choices(body: &Value) -> u64 {
    ["/n", "/generationConfig/candidateCount"]
        .iter()
        .filter_map(|pointer| body.pointer(pointer).and_then(Value::as_u64))
        .max()
        .unwrap_or(1)
        .max(1)
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
    /// Every budget and rate limit that applies to `payer` — the config's
    /// rules of its owner and the stored limits of its owner, key, team and
    /// tags — with what it has used and holds in its current window, for
    /// `GET /v1/usage` and `intentgate usage`.
    pub async fn usage(&self, payer: Payer<'_>) -> Result<Vec<MeterUsage>, crate::store::StoreError> {
        use crate::budgets::{LimitKind, Window};
        let configured = self.configured();
        let limits = &configured.limits;
        let stored = self.spend_limits();
        let mut meters: Vec<(LimitKind, String, i64, Window)> = Vec::new();
        for route in configured.routes.keys() {
            for (meter, limit, window) in limits.budget_meters(payer.owner, route) {
                meters.push((LimitKind::Budget, meter, limit, window));
            }
            for kind in [LimitKind::Requests, LimitKind::Tokens] {
                for (meter, limit) in limits.rate_meters(payer.owner, route, kind) {
                    meters.push((kind, meter, limit, Window::Minute));
                }
            }
            for limit in stored.iter() {
                for meter in limit.meters_of(payer, route) {
                    meters.push((limit.kind, meter, limit.amount, limit.window));
                }
            }
        }
        self.read_meters(meters).await
    }

    /// Every stored limit's meter, for `/metrics`.
    pub async fn stored_limit_usage(&self) -> Result<Vec<MeterUsage>, crate::store::StoreError> {
        let stored = self.spend_limits();
        // A `*` limit's shares are per key, team, tag or owner: their meters
        // are read where a caller asks (`usage`), not listed here.
        let single = stored.iter().filter(|limit| limit.subject != "*");
        self.read_meters(
            single.map(|limit| (limit.kind, limit.meter(), limit.amount, limit.window)).collect(),
        )
        .await
    }

    /// `meters` (kind, name, limit, window) as they stand in their current
    /// windows, once each (the smallest limit of a shared meter).
    async fn read_meters(
        &self,
        mut meters: Vec<(crate::budgets::LimitKind, String, i64, crate::budgets::Window)>,
    ) -> Result<Vec<MeterUsage>, crate::store::StoreError> {
        let now = self.now_ms();
        meters.sort_by(|a, b| (&a.1, a.2).cmp(&(&b.1, b.2)));
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
    pub fn currency(&self) -> String {
        self.configured().billing.currency.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_dialects_limit_and_every_choice_is_reserved() {
        assert_eq!(completion_limit(&json!({"max_output_tokens": 900})), Some(900), "the Responses API");
        let gemini = json!({"generationConfig": {"maxOutputTokens": 100, "candidateCount": 8}});
        assert_eq!((completion_limit(&gemini), choices(&gemini)), (Some(100), 8), "Gemini's candidates");
        let chat = json!({"max_tokens": 10, "max_completion_tokens": 50, "n": 3});
        assert_eq!((completion_limit(&chat), choices(&chat)), (Some(50), 3));
        assert_eq!((completion_limit(&json!({})), choices(&json!({}))), (None, 1));
    }
}
