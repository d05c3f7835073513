//! Prices and costs. A price is given per million tokens in the config's
//! currency; it is kept as integer micro-units per million tokens, and a
//! cost as integer nano-units, so sums are exact (a cost is rounded up to
//! the next nano-unit once, per attempt).

use serde::Deserialize;

/// A provider's price, as `price = { input_per_mtok = 3.00, output_per_mtok
/// = 15.00, cached_input_per_mtok = 0.30, cache_write_per_mtok = 3.75,
/// reasoning_per_mtok = 15.00 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "PriceConfig")]
pub struct Price {
    /// Micro-units of currency per million prompt tokens neither read from
    /// nor written to a cache.
    input: i64,
    /// Per million prompt tokens read from the provider's cache.
    cached_input: i64,
    /// Per million prompt tokens written to the provider's cache
    /// (Anthropic's `cache_creation_input_tokens`).
    cache_write: i64,
    /// Per million completion tokens that are not reasoning.
    output: i64,
    /// Per million reasoning (thinking) tokens of the completion.
    reasoning: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceConfig {
    input_per_mtok: f64,
    output_per_mtok: f64,
    /// Defaults to `input_per_mtok`.
    cached_input_per_mtok: Option<f64>,
    /// Defaults to `input_per_mtok`.
    cache_write_per_mtok: Option<f64>,
    /// Defaults to `output_per_mtok` (what OpenAI and Anthropic bill).
    reasoning_per_mtok: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PriceError {
    #[error("`{0}` must be a non-negative amount with at most 6 decimals")]
    NotAnAmount(&'static str),
}

impl TryFrom<PriceConfig> for Price {
    type Error = PriceError;

    fn try_from(config: PriceConfig) -> Result<Self, Self::Error> {
        let micros =
            |value: f64, name: &'static str| decimal_to_micros(value).ok_or(PriceError::NotAnAmount(name));
        let or = |value: Option<f64>, name: &'static str, default: i64| {
            value.map_or(Ok(default), |v| micros(v, name))
        };
        let input = micros(config.input_per_mtok, "input_per_mtok")?;
        let output = micros(config.output_per_mtok, "output_per_mtok")?;
        Ok(Price {
            input,
            output,
            cached_input: or(config.cached_input_per_mtok, "cached_input_per_mtok", input)?,
            cache_write: or(config.cache_write_per_mtok, "cache_write_per_mtok", input)?,
            reasoning: or(config.reasoning_per_mtok, "reasoning_per_mtok", output)?,
        })
    }
}

/// What a provider reported it used for one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// All prompt tokens, cached ones included (OpenAI's `prompt_tokens`).
    pub prompt_tokens: u64,
    /// Of `prompt_tokens`, those read from the provider's cache.
    pub cached_tokens: u64,
    /// Of `prompt_tokens`, those written to the provider's cache.
    pub cache_write_tokens: u64,
    /// All completion tokens, reasoning included.
    pub completion_tokens: u64,
    /// Of `completion_tokens`, those spent reasoning.
    pub reasoning_tokens: u64,
}

impl TokenUsage {
    /// Reads OpenAI's `usage` object (`prompt_tokens_details.cached_tokens`
    /// and `cache_write_tokens`, `completion_tokens_details.reasoning_tokens`
    /// included); `None` when it does not say how many tokens were used.
    pub fn from_openai(usage: &serde_json::Value) -> Option<TokenUsage> {
        let prompt_tokens = usage.get("prompt_tokens")?.as_u64()?;
        let completion_tokens = usage.get("completion_tokens")?.as_u64()?;
        let detail = |pointer: &str| usage.pointer(pointer).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let cached_tokens = detail("/prompt_tokens_details/cached_tokens").min(prompt_tokens);
        let cache_write_tokens =
            detail("/prompt_tokens_details/cache_write_tokens").min(prompt_tokens - cached_tokens);
        let reasoning_tokens = detail("/completion_tokens_details/reasoning_tokens").min(completion_tokens);
        Some(TokenUsage {
            prompt_tokens,
            cached_tokens,
            cache_write_tokens,
            completion_tokens,
            reasoning_tokens,
        })
    }

    pub fn total_tokens(&self) -> i64 {
        saturating_i64(u128::from(self.prompt_tokens) + u128::from(self.completion_tokens))
    }
}

impl Price {
    /// The cost of `usage`, in nano-units, rounded up.
    pub fn cost_nanos(&self, usage: &TokenUsage) -> i64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let written = usage.cache_write_tokens.min(usage.prompt_tokens - cached);
        let uncached = usage.prompt_tokens - cached - written;
        let reasoning = usage.reasoning_tokens.min(usage.completion_tokens);
        let micro_units_per_mtok = u128::from(uncached) * positive(self.input)
            + u128::from(cached) * positive(self.cached_input)
            + u128::from(written) * positive(self.cache_write)
            + u128::from(usage.completion_tokens - reasoning) * positive(self.output)
            + u128::from(reasoning) * positive(self.reasoning);
        // micro-units per million tokens × tokens / 10^6 = micro-units;
        // × 10^3 = nano-units: one division by 1,000, rounded up.
        saturating_i64(micro_units_per_mtok.div_ceil(1_000))
    }

    /// The most `prompt_tokens` and `completion_tokens` can cost: every
    /// prompt token at the dearer of the input and cache-write rates, every
    /// completion token at the dearer of the output and reasoning rates.
    pub fn worst_case_nanos(&self, prompt_tokens: u64, completion_tokens: u64) -> i64 {
        let dearest = Price {
            input: self.input.max(self.cache_write),
            output: self.output.max(self.reasoning),
            ..*self
        };
        dearest.cost_nanos(&TokenUsage { prompt_tokens, completion_tokens, ..TokenUsage::default() })
    }
}

fn positive(micros: i64) -> u128 {
    u128::try_from(micros).unwrap_or(0)
}

fn saturating_i64(value: u128) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `value` in micro-units, if it is a non-negative amount with at most six
/// decimals (a price finer than that is a typo, not a price).
fn decimal_to_micros(value: f64) -> Option<i64> {
    scaled(value, 1e6)
}

/// A configured amount of money (`limit = 5.00`) in nano-units.
pub fn decimal_to_nanos(value: f64) -> Option<i64> {
    scaled(value, 1e9)
}

fn scaled(value: f64, scale: f64) -> Option<i64> {
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    let scaled = (value * scale).round();
    // Decimal fractions are not exact in binary: 0.075 × 10^6 is
    // 75000.00000000001. Anything further from an integer has more decimals.
    let exact = (scaled - value * scale).abs() < 1e-3;
    #[allow(clippy::cast_possible_truncation)]
    (exact && scaled < 9.0e18).then_some(scaled as i64)
}

/// Nano-units as a decimal number of the currency, for answers and metrics.
pub fn nanos_to_decimal(nanos: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let value = nanos as f64 / 1e9;
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(input: f64, output: f64, cached: Option<f64>) -> Price {
        Price::try_from(PriceConfig {
            input_per_mtok: input,
            output_per_mtok: output,
            cached_input_per_mtok: cached,
            cache_write_per_mtok: None,
            reasoning_per_mtok: None,
        })
        .unwrap()
    }

    #[test]
    fn cache_writes_and_reasoning_have_their_own_rates_and_bound_the_worst_case() {
        let claude = Price::try_from(PriceConfig {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cached_input_per_mtok: Some(0.30),
            cache_write_per_mtok: Some(3.75),
            reasoning_per_mtok: Some(20.0),
        })
        .unwrap();
        let usage = TokenUsage {
            prompt_tokens: 1_000,
            cached_tokens: 600,
            cache_write_tokens: 300,
            completion_tokens: 100,
            reasoning_tokens: 40,
        };
        // 100 × 3 + 600 × 0.30 + 300 × 3.75 + 60 × 15 + 40 × 20, per 10^6, in nano-units.
        assert_eq!(claude.cost_nanos(&usage), 300_000 + 180_000 + 1_125_000 + 900_000 + 800_000);
        assert!(
            claude.worst_case_nanos(1_000, 100) >= claude.cost_nanos(&usage),
            "no report within the limits costs more"
        );
    }

    #[test]
    fn costs_are_exact_nano_units_rounded_up_once() {
        let mini = price(0.15, 0.60, Some(0.075));
        // 1,000 uncached × 0.15 + 1,000 cached × 0.075 + 500 × 0.60 per 10^6.
        let usage = TokenUsage {
            prompt_tokens: 2_000,
            cached_tokens: 1_000,
            completion_tokens: 500,
            ..Default::default()
        };
        assert_eq!(mini.cost_nanos(&usage), 150_000 + 75_000 + 300_000);
        // One token at 0.075 per million is 0.075 micro-units: 75 nano-units.
        let one_cached = TokenUsage { prompt_tokens: 1, cached_tokens: 1, ..Default::default() };
        assert_eq!(mini.cost_nanos(&one_cached), 75);
        // 0.000001 per million tokens × 1 token rounds up to one nano-unit.
        assert_eq!(price(0.000001, 0.0, None).cost_nanos(&one_cached), 1);
    }

    #[test]
    fn cached_input_defaults_to_the_input_price() {
        let price = price(1.0, 2.0, None);
        let usage = TokenUsage { prompt_tokens: 10, cached_tokens: 10, ..Default::default() };
        assert_eq!(price.cost_nanos(&usage), 10_000);
    }

    #[test]
    fn amounts_must_be_money() {
        assert_eq!(decimal_to_nanos(5.0), Some(5_000_000_000));
        assert_eq!(decimal_to_nanos(0.01), Some(10_000_000));
        assert_eq!(decimal_to_micros(0.0000001), None);
        assert_eq!(decimal_to_micros(-1.0), None);
        assert_eq!(decimal_to_micros(f64::NAN), None);
        assert_eq!(decimal_to_micros(0.075), Some(75_000));
    }

    #[test]
    fn usage_is_read_from_openai_shape() {
        let usage = serde_json::json!({"prompt_tokens": 12, "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4}});
        assert_eq!(
            TokenUsage::from_openai(&usage),
            Some(TokenUsage {
                prompt_tokens: 12,
                cached_tokens: 4,
                completion_tokens: 3,
                ..Default::default()
            })
        );
        assert_eq!(TokenUsage::from_openai(&serde_json::json!({})), None);
    }
}
