//! Provider health: a provider whose calls keep failing is passed over for
//! a cool-down, then given one probe; the first answer puts it back.
//!
//! A circuit per provider. Closed, every call goes ahead; after
//! `[providers.health] failures` signs of trouble in a row (a refused
//! connection, a 429 or 5xx, a garbled answer, silence) it opens for
//! `cooldown`, and the chain's next provider serves instead. When the
//! cool-down is over one request is let through as a probe (half-open); its
//! answer closes the circuit, its failure opens it again. A rejection that
//! is about the request (another 4xx: too long, refused by content policy)
//! says nothing about the provider and counts neither way.
//!
//! Every replica keeps its own circuits and shares each change through the
//! store (`shared_health.rs`): a circuit another replica opened or closed
//! is adopted here within a second, and a replica that starts reads them
//! all first. So a dead provider is passed over everywhere once one
//! replica has seen it fail; each replica still lets its own probe through
//! when the cool-down ends. When the store cannot be reached, each replica
//! goes on with what it knows.
//!
//! Skipping a provider never sends anything twice — it only changes which
//! provider the next attempt goes to — so health needs no safety argument,
//! only a bound on harm: when every provider of a chain is cooling down, the
//! first of them is tried anyway (a job is never failed for want of a
//! healthy provider), and a probe whose answer never comes is given up
//! after one more cool-down, so a lost probe cannot shut a provider out.

use std::collections::HashMap;
use std::sync::Mutex;

use intentgate_providers::Failure;

use crate::config::HealthConfig;
use crate::store::SharedCircuit;

/// What a provider's call said about the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    /// It answered.
    Answered,
    /// It failed in a way that is about the provider.
    Trouble,
    /// It failed in a way that is about the request.
    Neutral,
}

impl Sign {
    pub fn of_failure(failure: &Failure) -> Sign {
        match failure {
            // 408 and 424 are Bedrock's model timeout and model error
            // (`ModelTimeoutException`, `ModelErrorException`, a stream's
            // `modelStreamErrorException`): the model failed, not the request.
            Failure::Rejected { status, .. } if matches!(*status, 408 | 424 | 429) || *status >= 500 => {
                Sign::Trouble
            }
            Failure::Rejected { .. } => Sign::Neutral,
            Failure::NotSent { local: true, .. } => Sign::Neutral,
            Failure::NotSent { .. } | Failure::BadOutput { .. } | Failure::Unknown { .. } => Sign::Trouble,
        }
    }
}

/// Whether a provider may be sent the next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    /// Cooling down no more: this attempt is the one probe let through.
    /// Whoever took it and then sends nothing gives it back
    /// ([`Health::release_probe`]), or the provider waits a cool-down more.
    Probe,
    /// Cooling down: skip it, with this reason.
    CoolingDown(String),
}

/// A change of a circuit, for the other replicas to adopt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It opened (again): passed over until then.
    Opened { until_ms: i64, failures: u32 },
    /// An answer closed it.
    Closed,
}

impl Change {
    /// The change as the store shares it.
    pub fn shared(self, provider: &str, now_ms: i64, replica: &str) -> SharedCircuit {
        let (open_until, failures) = match self {
            Change::Opened { until_ms, failures } => (Some(until_ms), i64::from(failures)),
            Change::Closed => (None, 0),
        };
        SharedCircuit {
            provider: provider.to_owned(),
            open_until,
            failures,
            changed_at: now_ms,
            changed_by: replica.to_owned(),
        }
    }
}

#[derive(Debug, Default)]
struct Circuit {
    /// When it last opened or closed, here or on another replica.
    changed_at_ms: i64,
    /// Signs of trouble since the last answer.
    failures: u32,
    /// Open (cooling down) until then.
    open_until_ms: Option<i64>,
    /// When the half-open probe was let through, if one is out.
    probe_since_ms: Option<i64>,
}

/// A provider's circuit as a reader sees it (`GET /v1/routes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthState {
    /// `healthy`; `cooling_down` (passed over); `awaiting_probe` (the next
    /// attempt probes it); `probing` (a probe is out).
    pub state: &'static str,
    /// Signs of trouble in a row.
    pub failures: u32,
    /// Until when it is passed over, while it cools down.
    pub cooling_until_ms: Option<i64>,
}

impl Default for HealthState {
    fn default() -> Self {
        HealthState { state: "healthy", failures: 0, cooling_until_ms: None }
    }
}

/// Every provider's circuit.
#[derive(Debug, Default)]
pub struct Health {
    circuits: Mutex<HashMap<String, Circuit>>,
}

impl Health {
    /// Whether `provider` may be sent an attempt now; lets one probe
    /// through once its cool-down is over.
    pub fn check(&self, provider: &str, config: &HealthConfig, now_ms: i64) -> Verdict {
        let mut circuits = self.circuits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(circuit) = circuits.get_mut(provider) else { return Verdict::Healthy };
        let Some(open_until_ms) = circuit.open_until_ms else { return Verdict::Healthy };
        let cooldown = crate::engine::clock::millis(config.cooldown.into());
        if now_ms < open_until_ms {
            return Verdict::CoolingDown(format!(
                "unhealthy: {} failures in a row; cooling down for {} ms more",
                circuit.failures,
                open_until_ms - now_ms
            ));
        }
        match circuit.probe_since_ms {
            Some(since) if now_ms < since + cooldown => {
                Verdict::CoolingDown(format!("unhealthy: a probe is out since {} ms", now_ms - since))
            }
            _ => {
                circuit.probe_since_ms = Some(now_ms);
                Verdict::Probe
            }
        }
    }

    /// Records what a call to `provider` said; the change of its circuit,
    /// when this opened or closed it.
    pub fn observe(&self, provider: &str, config: &HealthConfig, sign: Sign, now_ms: i64) -> Option<Change> {
        if config.failures == 0 || sign == Sign::Neutral {
            return None;
        }
        let mut circuits = self.circuits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let circuit = circuits.entry(provider.to_owned()).or_default();
        if sign == Sign::Answered {
            let was_open = circuit.open_until_ms.is_some();
            *circuit = Circuit { changed_at_ms: now_ms, ..Circuit::default() };
            return was_open.then_some(Change::Closed);
        }
        circuit.failures = circuit.failures.saturating_add(1);
        let probing = circuit.probe_since_ms.take().is_some();
        if circuit.failures >= config.failures && (circuit.open_until_ms.is_none() || probing) {
            let until_ms = now_ms + crate::engine::clock::millis(config.cooldown.into());
            circuit.open_until_ms = Some(until_ms);
            circuit.changed_at_ms = now_ms;
            return Some(Change::Opened { until_ms, failures: circuit.failures });
        }
        None
    }

    /// Takes on a change another replica made (`shared`), unless this
    /// circuit changed later; whether it did.
    pub fn adopt(&self, shared: &SharedCircuit) -> bool {
        let mut circuits = self.circuits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let circuit = circuits.entry(shared.provider.clone()).or_default();
        if shared.changed_at <= circuit.changed_at_ms {
            return false;
        }
        *circuit = Circuit {
            changed_at_ms: shared.changed_at,
            failures: u32::try_from(shared.failures).unwrap_or(u32::MAX),
            open_until_ms: shared.open_until,
            probe_since_ms: None,
        };
        true
    }

    /// Gives back the probe [`Health::check`] let through when nothing was
    /// sent on it (the request was a duplicate, or a limit refused it), so
    /// the next request probes instead of waiting a cool-down more.
    pub fn release_probe(&self, provider: &str) {
        let mut circuits = self.circuits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(circuit) = circuits.get_mut(provider) {
            circuit.probe_since_ms = None;
        }
    }

    /// What `provider`'s circuit says at `now_ms`, for a reader: unlike
    /// [`Health::check`], it lets no probe through.
    pub fn state(&self, provider: &str, now_ms: i64) -> HealthState {
        let circuits = self.circuits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(circuit) = circuits.get(provider) else { return HealthState::default() };
        let state = match (circuit.open_until_ms, circuit.probe_since_ms) {
            (None, _) => "healthy",
            (Some(until), _) if now_ms < until => "cooling_down",
            (Some(_), Some(_)) => "probing",
            (Some(_), None) => "awaiting_probe",
        };
        let cooling_until_ms = circuit.open_until_ms.filter(|until| now_ms < *until);
        HealthState { state, failures: circuit.failures, cooling_until_ms }
    }

    /// The providers whose circuit is open or half-open now.
    pub fn unhealthy(&self) -> Vec<String> {
        let circuits = self.circuits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        circuits.iter().filter(|(_, c)| c.open_until_ms.is_some()).map(|(name, _)| name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HumanDuration;

    fn config() -> HealthConfig {
        HealthConfig { failures: 2, cooldown: HumanDuration::millis(1000) }
    }

    #[test]
    fn opens_after_failures_in_a_row_then_lets_one_probe_through() {
        let (health, config) = (Health::default(), config());
        assert_eq!(health.observe("p", &config, Sign::Trouble, 0), None);
        assert_eq!(health.check("p", &config, 1), Verdict::Healthy, "one failure is not a pattern");
        let opened = health.observe("p", &config, Sign::Trouble, 10);
        assert_eq!(opened, Some(Change::Opened { until_ms: 1010, failures: 2 }), "the second opens it");
        assert!(matches!(health.check("p", &config, 500), Verdict::CoolingDown(_)));
        assert_eq!(health.check("p", &config, 1010), Verdict::Probe, "the probe");
        assert!(matches!(health.check("p", &config, 1011), Verdict::CoolingDown(_)), "only one probe");
        assert!(health.observe("p", &config, Sign::Trouble, 1020).is_some(), "a failed probe opens it again");
        assert!(matches!(health.check("p", &config, 1500), Verdict::CoolingDown(_)));
        assert_eq!(health.check("p", &config, 2100), Verdict::Probe, "the next probe");
        assert_eq!(health.observe("p", &config, Sign::Answered, 2110), Some(Change::Closed));
        assert_eq!(health.observe("p", &config, Sign::Answered, 2111), None, "closed already");
        assert_eq!(health.check("p", &config, 2111), Verdict::Healthy, "an answer closes it");
        assert!(health.unhealthy().is_empty());
    }

    #[test]
    fn another_replicas_change_is_adopted_unless_this_one_changed_later() {
        let (health, config) = (Health::default(), config());
        let opened = |at: i64, until: Option<i64>| SharedCircuit {
            provider: "p".into(),
            open_until: until,
            failures: 5,
            changed_at: at,
            changed_by: "other".into(),
        };
        assert!(health.adopt(&opened(100, Some(5000))), "opened elsewhere");
        assert!(matches!(health.check("p", &config, 200), Verdict::CoolingDown(_)));
        assert!(!health.adopt(&opened(100, Some(5000))), "the same change again");
        assert_eq!(health.observe("p", &config, Sign::Answered, 300), Some(Change::Closed), "closed here");
        assert!(!health.adopt(&opened(250, Some(6000))), "an older change");
        assert_eq!(health.check("p", &config, 400), Verdict::Healthy);
        assert!(health.adopt(&opened(500, None)), "closed elsewhere, later");
        assert_eq!(health.check("p", &config, 600), Verdict::Healthy);
    }

    #[test]
    fn a_model_that_fails_or_times_out_is_trouble_and_a_refused_request_is_not() {
        let rejected = |status| Failure::Rejected { status, retry_after: None, body: String::new() };
        for status in [408, 424, 429, 500, 503, 529] {
            assert_eq!(Sign::of_failure(&rejected(status)), Sign::Trouble, "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert_eq!(Sign::of_failure(&rejected(status)), Sign::Neutral, "{status}");
        }
    }

    #[test]
    fn a_lost_probe_is_given_up_after_a_cool_down() {
        let (health, config) = (Health::default(), config());
        health.observe("p", &config, Sign::Trouble, 0);
        health.observe("p", &config, Sign::Trouble, 0);
        assert_eq!(health.check("p", &config, 1000), Verdict::Probe, "the probe, never heard of again");
        assert!(matches!(health.check("p", &config, 1999), Verdict::CoolingDown(_)));
        assert_eq!(health.check("p", &config, 2000), Verdict::Probe, "another probe");
    }

    #[test]
    fn a_probe_given_back_is_the_next_requests() {
        let (health, config) = (Health::default(), config());
        health.observe("p", &config, Sign::Trouble, 0);
        health.observe("p", &config, Sign::Trouble, 0);
        assert_eq!(health.check("p", &config, 1000), Verdict::Probe, "taken by a duplicate");
        health.release_probe("p");
        assert_eq!(health.check("p", &config, 1001), Verdict::Probe, "and given back: the next one probes");
    }

    #[test]
    fn a_request_refused_before_any_connection_says_nothing_of_the_provider() {
        let local = Failure::NotSent { reason: "cannot encode the request".into(), local: true };
        assert_eq!(Sign::of_failure(&local), Sign::Neutral);
        let refused = Failure::NotSent { reason: "connection refused".into(), local: false };
        assert_eq!(Sign::of_failure(&refused), Sign::Trouble);
    }

    #[test]
    fn request_faults_count_neither_way_and_zero_turns_it_off() {
        let (health, config) = (Health::default(), config());
        for _ in 0..5 {
            health.observe("p", &config, Sign::Neutral, 0);
        }
        assert_eq!(health.check("p", &config, 1), Verdict::Healthy);
        let off = HealthConfig { failures: 0, ..config };
        for _ in 0..5 {
            health.observe("q", &off, Sign::Trouble, 0);
        }
        assert_eq!(health.check("q", &off, 1), Verdict::Healthy);
        let refused = Failure::Rejected { status: 400, retry_after: None, body: String::new() };
        assert_eq!(Sign::of_failure(&refused), Sign::Neutral);
        let overloaded = Failure::Rejected { status: 529, retry_after: None, body: String::new() };
        assert_eq!(Sign::of_failure(&overloaded), Sign::Trouble);
    }
}
