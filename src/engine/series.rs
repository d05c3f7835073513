//! A provider's metric series on the path of every answer, registered once
//! when its entry is built. `metrics::counter!` with labels builds its key,
//! copies the label values and looks the series up in the recorder's map
//! on every call: four such calls for every answer cost more than the rest
//! of counting it. A handle is an `Arc` to the series itself.

use metrics::{Counter, Histogram};

use crate::jobs::AttemptOutcome;
use crate::telemetry;

/// The series of one provider that every delivered answer moves.
pub(super) struct ProviderSeries {
    /// `intentgate_attempts_total{outcome="ok"}`.
    pub answered: Counter,
    pub input_tokens: Counter,
    pub output_tokens: Counter,
    /// Of the input, read from the provider's cache.
    pub cached_input_tokens: Counter,
    /// Of the input, written to the provider's cache.
    pub cache_write_tokens: Counter,
    /// Of the output, spent reasoning or thinking.
    pub reasoning_tokens: Counter,
    pub spend: Counter,
    pub latency: Histogram,
}

impl ProviderSeries {
    /// Registers (or finds) `provider`'s series with the process's recorder,
    /// which the gateway installs before it builds its engine
    /// (`app::start_with_simulator`); before that, handles count nothing.
    pub fn new(provider: &str) -> ProviderSeries {
        let name = || provider.to_owned();
        ProviderSeries {
            answered: metrics::counter!(telemetry::ATTEMPTS, "provider" => name(), "outcome" => AttemptOutcome::Ok.as_str()),
            input_tokens: metrics::counter!(telemetry::PROVIDER_TOKENS, "provider" => name(), "direction" => "input"),
            output_tokens: metrics::counter!(telemetry::PROVIDER_TOKENS, "provider" => name(), "direction" => "output"),
            cached_input_tokens: metrics::counter!(telemetry::PROVIDER_TOKEN_DETAILS, "provider" => name(), "kind" => "cached_input"),
            cache_write_tokens: metrics::counter!(telemetry::PROVIDER_TOKEN_DETAILS, "provider" => name(), "kind" => "cache_write"),
            reasoning_tokens: metrics::counter!(telemetry::PROVIDER_TOKEN_DETAILS, "provider" => name(), "kind" => "reasoning"),
            spend: metrics::counter!(telemetry::SPEND, "provider" => name()),
            latency: metrics::histogram!(telemetry::PROVIDER_LATENCY, "provider" => name()),
        }
    }
}
