//! `[[budgets]]` and `[[rate_limits]]`, and the [`Hold`]s they put on a
//! job or an attempt.
//!
//! A *meter* is one counter per window (a row in the store's `meters`
//! table): `held` is what open attempts reserved, `used` what settled ones
//! were charged. A hold fits when `used + held + amount <= limit`; the store
//! checks and books every hold of one attempt in the transaction that
//! writes it, so concurrent requests cannot overshoot a limit (they would
//! only with actual costs above their reservations: see docs/budgets.md).

use serde::Deserialize;

use super::{Window, decimal_to_nanos};
use crate::jobs::Amounts;

/// `[[budgets]] owner = "alice", limit = 5.00, window = "1d"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetRule {
    /// An owner, or `*`: every owner gets a budget of their own.
    pub owner: String,
    /// Only this route's spend; `*`: one budget per route; unset: all routes.
    pub route: Option<String>,
    /// In the configured currency.
    #[serde(deserialize_with = "money")]
    pub limit: i64,
    pub window: Window,
}

/// `[[rate_limits]] owner = "*", route = "chat", requests_per_minute = 60`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitRule {
    /// An owner, or `*` (each owner their own); unset: all owners together.
    pub owner: Option<String>,
    /// A route, or `*` (each route its own); unset: all routes together.
    pub route: Option<String>,
    /// Upstream calls (attempts sent) per minute: a new job's first
    /// attempt, a retry, a failover and an attempt started by hand each
    /// count one; a duplicate of an existing job, answered from the store,
    /// counts none.
    pub requests_per_minute: Option<u64>,
    /// Tokens per minute: an attempt reserves its prompt plus `max_tokens`
    /// and is charged what the provider reported.
    pub tokens_per_minute: Option<u64>,
}

fn money<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let value = f64::deserialize(deserializer)?;
    decimal_to_nanos(value)
        .ok_or_else(|| serde::de::Error::custom("must be a non-negative amount with at most 9 decimals"))
}

/// Which limit a hold counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// A spend budget, in nano-units.
    Budget,
    /// `requests_per_minute`.
    Requests,
    /// `tokens_per_minute`.
    Tokens,
}

impl LimitKind {
    /// How the kind is named in the store and the admin API.
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::Budget => "budget",
            LimitKind::Requests => "requests",
            LimitKind::Tokens => "tokens",
        }
    }

    /// The unit of the meter, as stored in `holds.unit`.
    pub fn unit(self) -> &'static str {
        match self {
            LimitKind::Budget => "nanos",
            LimitKind::Requests => "requests",
            LimitKind::Tokens => "tokens",
        }
    }
}

/// One meter a job or an attempt counts against, in one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub kind: LimitKind,
    /// The meter's name: the rule and whose share of it, e.g.
    /// `budget/owner=alice/route=*/1d`.
    pub meter: String,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub limit: i64,
    /// What this job or attempt reserves (requests: 1, counted as used).
    pub amount: i64,
}

impl Hold {
    /// Whether `amount` fits next to what the meter holds already.
    pub fn fits(&self, used: i64, held: i64) -> bool {
        used.saturating_add(held).saturating_add(self.amount) <= self.limit
    }

    pub fn refusal(&self, used: i64, held: i64) -> LimitRefusal {
        LimitRefusal {
            kind: self.kind,
            meter: self.meter.clone(),
            limit: self.limit,
            used,
            held,
            amount: self.amount,
            window_end_ms: self.window_end_ms,
        }
    }
}

/// A hold that did not fit: nothing was sent, nothing was booked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} `{meter}`: {used} used and {held} reserved of {limit}; this needs {amount} more", kind_name(*kind))]
pub struct LimitRefusal {
    pub kind: LimitKind,
    pub meter: String,
    pub limit: i64,
    pub used: i64,
    pub held: i64,
    pub amount: i64,
    /// When the window ends and the meter starts from zero.
    pub window_end_ms: i64,
}

fn kind_name(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::Budget => "budget (nano-units)",
        LimitKind::Requests => "requests per minute",
        LimitKind::Tokens => "tokens per minute",
    }
}

impl LimitRefusal {
    pub fn is_budget(&self) -> bool {
        self.kind == LimitKind::Budget
    }

    /// The job error's `code` (and the API problem's slug) for it.
    pub fn code(&self) -> &'static str {
        if self.is_budget() { "budget-exhausted" } else { "rate-limited" }
    }
}

/// Every configured budget and rate limit.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub budgets: Vec<BudgetRule>,
    pub rate_limits: Vec<RateLimitRule>,
}

/// Whom a rule's share is for: `*` gives each a meter of their own, a name
/// applies to that one only, unset pools everyone.
fn share(rule: Option<&str>, actual: &str) -> Option<String> {
    match rule {
        None => Some("all".to_owned()),
        Some("*") => Some(actual.to_owned()),
        Some(name) if name == actual => Some(actual.to_owned()),
        Some(_) => None,
    }
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.budgets.is_empty() && self.rate_limits.is_empty()
    }

    /// Whether an attempt of `owner` on `route` is metered at all (so its
    /// tokens need counting, and it is booked, before it is sent).
    pub fn meters_attempts(&self, owner: &str, route: &str) -> bool {
        !self.budget_meters(owner, route).is_empty()
            || self.rate_meters(owner, route, LimitKind::Tokens).next().is_some()
            || self.rate_meters(owner, route, LimitKind::Requests).next().is_some()
    }

    /// The holds of one attempt, which is one upstream call: its worst-case
    /// cost against every budget of the owner and route, its worst-case
    /// tokens against every `tokens_per_minute`, one request against every
    /// `requests_per_minute`; ordered by meter so that concurrent writers
    /// lock meters in the same order.
    ///
    /// Requests are counted per attempt, not per job: a rate limit bounds
    /// what reaches the providers, and a retry, a failover or an attempt
    /// started by hand is as much a call as a new job's first.
    pub fn attempt_holds(&self, owner: &str, route: &str, reserved: Amounts, now_ms: i64) -> Vec<Hold> {
        let mut holds: Vec<Hold> = self
            .budget_meters(owner, route)
            .into_iter()
            .map(|(meter, limit, window)| {
                hold(LimitKind::Budget, meter, limit, window, reserved.nanos, now_ms)
            })
            .collect();
        holds.extend(self.rate_meters(owner, route, LimitKind::Tokens).map(|(meter, limit)| {
            hold(LimitKind::Tokens, meter, limit, Window::Minute, reserved.tokens, now_ms)
        }));
        holds.extend(
            self.rate_meters(owner, route, LimitKind::Requests)
                .map(|(meter, limit)| hold(LimitKind::Requests, meter, limit, Window::Minute, 1, now_ms)),
        );
        holds.sort_by(|a, b| (&a.meter, a.window_start_ms).cmp(&(&b.meter, b.window_start_ms)));
        holds
    }

    /// `(meter, limit, window)` of each budget that applies.
    pub fn budget_meters(&self, owner: &str, route: &str) -> Vec<(String, i64, Window)> {
        self.budgets
            .iter()
            .filter_map(|rule| {
                let owner = share(Some(&rule.owner), owner)?;
                let route = share(rule.route.as_deref(), route)?;
                let meter = format!("budget/owner={owner}/route={route}/{}", rule.window.as_str());
                Some((meter, rule.limit, rule.window))
            })
            .collect()
    }

    /// `(meter, limit)` of each rate limit that applies and limits `kind`
    /// (`Requests` or `Tokens`).
    pub fn rate_meters<'a>(
        &'a self,
        owner: &'a str,
        route: &'a str,
        kind: LimitKind,
    ) -> impl Iterator<Item = (String, i64)> + 'a {
        self.rate_limits.iter().enumerate().filter_map(move |(index, rule)| {
            let limit = match kind {
                LimitKind::Requests => rule.requests_per_minute?,
                LimitKind::Tokens => rule.tokens_per_minute?,
                LimitKind::Budget => return None,
            };
            let owner = share(rule.owner.as_deref(), owner)?;
            let route = share(rule.route.as_deref(), route)?;
            let meter = format!("rate{index}-{}/owner={owner}/route={route}/1m", kind.unit());
            Some((meter, i64::try_from(limit).unwrap_or(i64::MAX)))
        })
    }
}

pub(super) fn hold(
    kind: LimitKind,
    meter: String,
    limit: i64,
    window: Window,
    amount: i64,
    now_ms: i64,
) -> Hold {
    let (window_start_ms, window_end_ms) = window.bounds(now_ms);
    Hold { kind, meter, window_start_ms, window_end_ms, limit, amount }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            budgets: vec![
                BudgetRule { owner: "*".into(), route: None, limit: 5_000_000_000, window: Window::Day },
                BudgetRule {
                    owner: "alice".into(),
                    route: Some("*".into()),
                    limit: 1_000,
                    window: Window::Hour,
                },
            ],
            rate_limits: vec![RateLimitRule {
                owner: Some("*".into()),
                route: Some("chat".into()),
                requests_per_minute: Some(60),
                tokens_per_minute: Some(100_000),
            }],
        }
    }

    #[test]
    fn each_owner_gets_their_own_share_of_a_star_rule() {
        let holds = limits().attempt_holds("bob", "chat", Amounts { nanos: 10, tokens: 5 }, 0);
        let meters: Vec<&str> = holds.iter().map(|h| h.meter.as_str()).collect();
        assert_eq!(
            meters,
            [
                "budget/owner=bob/route=all/1d",
                "rate0-requests/owner=bob/route=chat/1m",
                "rate0-tokens/owner=bob/route=chat/1m"
            ]
        );
        assert_eq!((holds[0].amount, holds[1].amount, holds[2].amount), (10, 1, 5));
        let alice = limits().attempt_holds("alice", "extract", Amounts { nanos: 10, tokens: 5 }, 0);
        assert_eq!(alice.len(), 2, "{alice:?}");
        assert!(alice.iter().any(|h| h.meter == "budget/owner=alice/route=extract/1h"));
    }

    #[test]
    fn requests_count_per_attempt() {
        let holds = limits().attempt_holds("bob", "chat", Amounts { nanos: 10, tokens: 5 }, 61_000);
        let requests: Vec<&Hold> = holds.iter().filter(|h| h.kind == LimitKind::Requests).collect();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].meter, "rate0-requests/owner=bob/route=chat/1m");
        assert_eq!(
            (requests[0].window_start_ms, requests[0].window_end_ms, requests[0].amount),
            (60_000, 120_000, 1)
        );
        let extract = limits().attempt_holds("bob", "extract", Amounts::default(), 0);
        assert!(extract.iter().all(|h| h.kind != LimitKind::Requests));
    }

    #[test]
    fn a_hold_fits_up_to_the_limit_exactly() {
        let holds = limits().attempt_holds("bob", "chat", Amounts::default(), 0);
        let hold = holds.iter().find(|h| h.kind == LimitKind::Requests).expect("a request hold");
        assert!(hold.fits(58, 1));
        assert!(!hold.fits(59, 1));
    }
}
