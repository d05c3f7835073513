//! May a provider serve a route? The failover gate's one question (R9),
//! answered from the latest recorded run and the suite and provider as they
//! are now.

use std::time::Duration;

use serde::Serialize;

use crate::store::ContractRecord;

/// The verdict for one (route, provider) pair, with the reason people read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "eligible")]
pub enum Eligibility {
    #[serde(rename = "true")]
    Eligible { reason: String },
    #[serde(rename = "false")]
    Ineligible { reason: String },
}

impl Eligibility {
    pub fn is_eligible(&self) -> bool {
        matches!(self, Eligibility::Eligible { .. })
    }

    pub fn reason(&self) -> &str {
        match self {
            Eligibility::Eligible { reason } | Eligibility::Ineligible { reason } => reason,
        }
    }
}

/// What the record is compared against.
pub struct Current<'a> {
    pub route: &'a str,
    pub provider: &'a str,
    /// `None` when the route has no suite.
    pub suite_fingerprint: Option<&'a str>,
    pub provider_fingerprint: &'a str,
    pub max_age: Duration,
    pub now_ms: i64,
}

pub fn judge(current: &Current<'_>, record: Option<&ContractRecord>) -> Eligibility {
    let ineligible = |reason: String| Eligibility::Ineligible { reason };
    let Some(suite_fingerprint) = current.suite_fingerprint else {
        return ineligible(format!("route `{}` has no contract suite", current.route));
    };
    let Some(record) = record else {
        return ineligible(format!(
            "no recorded run: `intentgate contract run --route {} --provider {}`",
            current.route, current.provider
        ));
    };
    let when = crate::jobs::rfc3339(record.finished_at);
    if record.suite_fingerprint != suite_fingerprint {
        return ineligible(format!("stale: the suite changed after the run of {when}"));
    }
    if record.provider_fingerprint != current.provider_fingerprint {
        return ineligible(format!(
            "stale: the provider's dialect, base URL, model, tokenizer or request options changed \
             after the run of {when}"
        ));
    }
    if !record.passed {
        return ineligible(format!("failed its run of {when}: {}", first_failure(&record.report)));
    }
    let age_ms = current.now_ms.saturating_sub(record.finished_at);
    if u128::try_from(age_ms).unwrap_or(0) > current.max_age.as_millis() {
        return ineligible(format!("the passing run of {when} is older than contract_max_age"));
    }
    Eligibility::Eligible { reason: format!("passed its run of {when}") }
}

/// The first failure reason in a stored report, for a one-line verdict.
fn first_failure(report: &str) -> String {
    let report: serde_json::Value = serde_json::from_str(report).unwrap_or_default();
    report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|case| case["passed"] == false)
        .map(|case| {
            let reason = case["reasons"][0].as_str().unwrap_or("failed");
            format!("case `{}`: {reason}", case["case"].as_str().unwrap_or("?"))
        })
        .unwrap_or_else(|| "see its report".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(passed: bool, finished_at: i64) -> ContractRecord {
        ContractRecord {
            id: uuid::Uuid::nil(),
            route: "extract".into(),
            provider: "p".into(),
            suite_fingerprint: "s".into(),
            provider_fingerprint: "p1".into(),
            passed,
            started_at: finished_at,
            finished_at,
            report:
                r#"{"cases":[{"case":"long","passed":false,"reasons":["top-level key `x` is not allowed"]}]}"#
                    .into(),
        }
    }

    fn current<'a>(suite: Option<&'a str>, provider: &'a str) -> Current<'a> {
        Current {
            route: "extract",
            provider: "p",
            suite_fingerprint: suite,
            provider_fingerprint: provider,
            max_age: Duration::from_secs(60),
            now_ms: 100_000,
        }
    }

    #[test]
    fn only_a_passing_current_young_record_is_eligible() {
        assert!(judge(&current(Some("s"), "p1"), Some(&record(true, 90_000))).is_eligible());
        let cases = [
            (judge(&current(None, "p1"), Some(&record(true, 90_000))), "no contract suite"),
            (judge(&current(Some("s"), "p1"), None), "no recorded run"),
            (judge(&current(Some("s2"), "p1"), Some(&record(true, 90_000))), "the suite changed"),
            (
                judge(&current(Some("s"), "p2"), Some(&record(true, 90_000))),
                "tokenizer or request options changed",
            ),
            (judge(&current(Some("s"), "p1"), Some(&record(false, 90_000))), "case `long`: top-level key"),
            (judge(&current(Some("s"), "p1"), Some(&record(true, 1_000))), "older than contract_max_age"),
        ];
        for (verdict, expected) in cases {
            assert!(!verdict.is_eligible());
            assert!(verdict.reason().contains(expected), "{verdict:?}");
        }
    }
}
