//! Prometheus metrics: their names (one place), and the process-wide
//! recorder behind `GET /metrics`.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `intentgate_jobs_total` | counter | `result` = created, replayed, conflicted | job-creating requests by what the idempotency key decided |
//! | `intentgate_attempts_total` | counter | `provider`, `outcome` | attempts by outcome class (`ok`, `not_sent`, `rejected`, `bad_output`, `unknown`, `contract_violation`) |
//! | `intentgate_cas_races_lost_total` | counter | | answers that lost the compare-and-swap (superseded) |
//! | `intentgate_attempts_unknown` | gauge | `provider` | attempts now `unknown` (read from the store at scrape) |
//! | `intentgate_answer_bytes_held` | gauge | | room large provider answers hold now in the gateway's answer budget (`[server] max_answer_bytes_held`) |
//! | `intentgate_answer_budget_waits_total` | counter | | answers that waited, unread, for room in that budget |
//! | `intentgate_failovers_total` | counter | `from`, `to` | attempts started on another provider after a failure |
//! | `intentgate_failovers_refused_total` | counter | `route`, `provider` | providers passed over: no passing, current contract, a dialect that cannot express the request, a context window too small, or cooling down (unhealthy) |
//! | `intentgate_provider_circuit_opened_total` | counter | `provider` | times a provider was found unhealthy and passed over for its cool-down |
//! | `intentgate_provider_unhealthy` | gauge | `provider` | 1 while the provider's circuit is open (cooling down or probing), set at scrape |
//! | `intentgate_provider_latency_seconds` | histogram | `provider` | provider call time, per attempt |
//! | `intentgate_gateway_overhead_seconds` | histogram | `path` | request time minus the provider time spent in it |
//! | `intentgate_http_requests_total` | counter | `path` (the matched route), `status` | HTTP requests answered |
//! | `intentgate_spend_nanos_total` | counter | `provider` | what settled attempts were charged, in nano-units of `[billing] currency` |
//! | `intentgate_limit_refusals_total` | counter | `kind` = budget, rate | jobs and attempts refused by a budget or rate limit before anything was sent |
//! | `intentgate_limit_remaining` | gauge | `meter`, `unit` = nanos, requests, tokens | what each budget (nano-units) or rate limit has left in its current window, after what open attempts reserve (read from the store at scrape); names owners, so served to admin scrapes only (`api::metrics`) |
//! | `intentgate_provider_tokens_total` | counter | `provider`, `direction` = input, output | tokens the providers reported for answers delivered (won or superseded) |
//! | `intentgate_time_to_first_token_seconds` | histogram | `provider` | time from a streamed call's start to its first chunk |
//! | `intentgate_hedged_attempts_total` | counter | `route`, `provider` | attempts a route's hedge started beside a silent one |
//! | `intentgate_hedges_not_started_total` | counter | `route`, `reason` = budget, no_provider, blocked, store | hedges due that did not start |
//! | `intentgate_duplicate_executions_total` | counter | `route` | answers that came after another attempt completed the job: the intent ran twice |
//! | `intentgate_duplicate_spend_nanos_total` | counter | `route` | what those second executions were charged |
//! | `intentgate_config_info` | gauge | `version` | 1 for the configuration file this replica runs (0 for one a reload replaced) |
//!
//! The recorder is installed when the gateway starts ([`install`]), not on
//! the first scrape: what happens before it is counted, and the counters
//! whose labels are known up front are exposed at zero from the start, as
//! Prometheus users expect (a `rate()` over a series that appears only at
//! its first increment misses that increment).
//!
//! The recorder keeps every histogram sample in a queue until it is folded
//! into the buckets, which a scrape does and [`upkeep`] does every
//! [`UPKEEP_EVERY`]: `install_recorder` starts no upkeep of its own, and a
//! gateway nobody scraped held every sample ever recorded (two per request;
//! the benchmark's RSS grew by 6–7 MB a minute at 2,000 jobs/s).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const JOBS: &str = "intentgate_jobs_total";
pub const ATTEMPTS: &str = "intentgate_attempts_total";
pub const RACES_LOST: &str = "intentgate_cas_races_lost_total";
pub const UNKNOWN_ATTEMPTS: &str = "intentgate_attempts_unknown";
pub const ANSWER_BYTES_HELD: &str = "intentgate_answer_bytes_held";
pub const ANSWER_BUDGET_WAITS: &str = "intentgate_answer_budget_waits_total";
pub const FAILOVERS: &str = "intentgate_failovers_total";
pub const HEDGES: &str = "intentgate_hedged_attempts_total";
pub const LIMIT_REMAINING: &str = "intentgate_limit_remaining";
pub const PROVIDER_TOKENS: &str = "intentgate_provider_tokens_total";
pub const PROVIDER_TOKEN_DETAILS: &str = "intentgate_provider_token_details_total";
pub const STREAM_EVENTS_SKIPPED: &str = "intentgate_stream_events_skipped_total";
pub const TIME_TO_FIRST_TOKEN: &str = "intentgate_time_to_first_token_seconds";
pub const HEDGES_NOT_STARTED: &str = "intentgate_hedges_not_started_total";
pub const DUPLICATE_EXECUTIONS: &str = "intentgate_duplicate_executions_total";
pub const DUPLICATE_SPEND: &str = "intentgate_duplicate_spend_nanos_total";
pub const POSSIBLE_DUPLICATES: &str = "intentgate_possible_duplicate_executions_total";
pub const STREAM_CONTINUATIONS: &str = "intentgate_stream_continuations_total";
pub const FAILOVERS_REFUSED: &str = "intentgate_failovers_refused_total";
pub const PROVIDER_OPENED: &str = "intentgate_provider_circuit_opened_total";
pub const PROVIDERS_UNHEALTHY: &str = "intentgate_provider_unhealthy";
pub const CONFIG_INFO: &str = "intentgate_config_info";
pub const PROVIDER_LATENCY: &str = "intentgate_provider_latency_seconds";
pub const OVERHEAD: &str = "intentgate_gateway_overhead_seconds";
pub const HTTP_REQUESTS: &str = "intentgate_http_requests_total";
pub const SPEND: &str = "intentgate_spend_nanos_total";
pub const LIMIT_REFUSALS: &str = "intentgate_limit_refusals_total";
pub const USAGE_OVER_RESERVATION: &str = "intentgate_usage_over_reservation_total";
pub const CONNECTIONS_REFUSED: &str = "intentgate_connections_refused_total";
pub const STORE_BATCHES: &str = "intentgate_store_batches_total";
pub const STORE_BATCHED_WRITES: &str = "intentgate_store_batched_writes_total";

/// The `result` label values of [`JOBS`].
pub const JOB_RESULTS: &[&str] = &["created", "replayed", "conflicted"];

/// Buckets from 100 µs (gateway overhead) to 2 min (slow providers).
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 120.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed on first use. `None` if another
/// recorder was installed first (metrics then go there, not to `/metrics`).
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder =
                PrometheusBuilder::new().set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS);
            match builder.and_then(PrometheusBuilder::install_recorder) {
                Ok(handle) => {
                    describe();
                    Some(handle)
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot install the metrics recorder");
                    None
                }
            }
        })
        .as_ref()
}

/// How often [`upkeep`] folds recorded histogram samples into their buckets.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Folds the histograms' queued samples into their buckets every
/// [`UPKEEP_EVERY`], so that the memory they hold is bounded by the rate
/// times that period, scraped or not. Runs until its task is stopped.
pub async fn upkeep() {
    let Some(handle) = handle() else { return };
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// Installs the recorder (if not yet) and registers the counters whose
/// labels are known, at zero: jobs by result, races lost, attempts for
/// each configured provider and outcome class, and each hedged route's
/// hedges and second executions.
pub fn install(config: &crate::config::Config) {
    if handle().is_none() {
        return;
    }
    for result in JOB_RESULTS {
        metrics::counter!(JOBS, "result" => *result).increment(0);
    }
    metrics::counter!(RACES_LOST).increment(0);
    for kind in ["budget", "rate"] {
        metrics::counter!(LIMIT_REFUSALS, "kind" => kind).increment(0);
    }
    for provider in &config.providers {
        for outcome in crate::jobs::AttemptOutcome::ALL {
            metrics::counter!(ATTEMPTS, "provider" => provider.name.clone(), "outcome" => outcome.as_str())
                .increment(0);
        }
        metrics::counter!(USAGE_OVER_RESERVATION, "provider" => provider.name.clone()).increment(0);
        for direction in ["input", "output"] {
            metrics::counter!(PROVIDER_TOKENS, "provider" => provider.name.clone(), "direction" => direction)
                .increment(0);
        }
    }
    // Every way a chain may fail over: from a provider to one after it.
    for route in &config.routes {
        for (i, from) in route.chain.iter().enumerate() {
            for to in &route.chain[i + 1..] {
                metrics::counter!(FAILOVERS, "from" => from.clone(), "to" => to.clone()).increment(0);
            }
        }
    }
    for route in config.routes.iter().filter(|route| route.hedge.is_some()) {
        for provider in &route.chain {
            metrics::counter!(HEDGES, "route" => route.name.clone(), "provider" => provider.clone())
                .increment(0);
        }
        metrics::counter!(DUPLICATE_EXECUTIONS, "route" => route.name.clone()).increment(0);
        metrics::counter!(DUPLICATE_SPEND, "route" => route.name.clone()).increment(0);
    }
}

fn describe() {
    metrics::describe_counter!(JOBS, "Job-creating requests by what the idempotency key decided.");
    metrics::describe_counter!(ATTEMPTS, "Attempts by provider and outcome class.");
    metrics::describe_counter!(RACES_LOST, "Answers that lost the compare-and-swap and were superseded.");
    metrics::describe_gauge!(UNKNOWN_ATTEMPTS, "Attempts whose outcome is unknown now.");
    metrics::describe_counter!(FAILOVERS, "Attempts started on another provider after a failure.");
    metrics::describe_counter!(
        HEDGES,
        "Attempts a route's hedge started beside a silent one, by route and provider; each may execute the intent again."
    );
    metrics::describe_counter!(
        HEDGES_NOT_STARTED,
        "Hedges due but not started, by route and why: budget (its reservation did not fit), no_provider, blocked."
    );
    metrics::describe_counter!(
        DUPLICATE_EXECUTIONS,
        "Answers that arrived after another attempt had completed the job: the intent ran twice, by route."
    );
    metrics::describe_counter!(
        DUPLICATE_SPEND,
        "What those second executions were charged, in nano-units of the currency, by route."
    );
    metrics::describe_counter!(
        FAILOVERS_REFUSED,
        "Providers passed over: contract, dialect, context window or health."
    );
    metrics::describe_counter!(PROVIDER_OPENED, "Times a provider was found unhealthy and passed over.");
    metrics::describe_gauge!(PROVIDERS_UNHEALTHY, "1 while a provider's circuit is open in this process.");
    metrics::describe_gauge!(
        CONFIG_INFO,
        "1, labelled with the version of the configuration this process runs."
    );
    metrics::describe_histogram!(PROVIDER_LATENCY, metrics::Unit::Seconds, "Provider call time per attempt.");
    metrics::describe_histogram!(
        TIME_TO_FIRST_TOKEN,
        metrics::Unit::Seconds,
        "Time from a streamed call's start to its first chunk, by provider."
    );
    metrics::describe_counter!(
        PROVIDER_TOKENS,
        "Tokens providers reported for delivered answers, by direction."
    );
    metrics::describe_gauge!(
        LIMIT_REMAINING,
        "What each budget (nano-units) or rate limit has left in its window, after reservations."
    );
    metrics::describe_histogram!(OVERHEAD, metrics::Unit::Seconds, "Request time minus provider time.");
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP requests answered, by matched route and status.");
    metrics::describe_counter!(SPEND, "What settled attempts were charged, in nano-units of the currency.");
    metrics::describe_counter!(LIMIT_REFUSALS, "Jobs and attempts refused by a budget or rate limit.");
    metrics::describe_counter!(
        USAGE_OVER_RESERVATION,
        "Answers whose reported usage cost more than their attempt reserved, by provider: charged the reservation."
    );
    metrics::describe_counter!(
        PROVIDER_TOKEN_DETAILS,
        "Of the tokens providers reported: input read from (cached_input) or written to (cache_write) their cache, output spent reasoning."
    );
    metrics::describe_counter!(
        STREAM_EVENTS_SKIPPED,
        "Streamed events a provider sent that could not be read and were skipped (skip_malformed_events)."
    );
    describe_safeguards();
}

/// The metrics of what keeps the gateway in bounds: possible second
/// executions, refused connections, the answer budget, the store's batches.
fn describe_safeguards() {
    metrics::describe_gauge!(
        ANSWER_BYTES_HELD,
        "Bytes of the answer budget large provider answers hold now."
    );
    metrics::describe_counter!(
        ANSWER_BUDGET_WAITS,
        "Provider answers that waited, unread, for room in the answer budget."
    );
    metrics::describe_counter!(
        POSSIBLE_DUPLICATES,
        "Attempts left unknown (reset or silent) beside a hedge, or cut and continued by another provider: \
         the intent may have run twice."
    );
    metrics::describe_counter!(
        STREAM_CONTINUATIONS,
        "Streams cut after part of them reached the client and continued by the chain's next provider \
         (continue_cut_streams)."
    );
    metrics::describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections closed at once because their peer address held max_connections_per_peer."
    );
    metrics::describe_counter!(STORE_BATCHES, "PostgreSQL statements that wrote a batch of jobs, by write.");
    metrics::describe_counter!(
        STORE_BATCHED_WRITES,
        "Jobs written by those statements, by write (divided by the batches: the mean batch size)."
    );
}
