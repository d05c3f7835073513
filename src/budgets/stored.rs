//! Budgets and rate limits managed at runtime (`/v1/admin/limits`, kept in
//! the store's `spend_limits`), beside the config file's `[[budgets]]` and
//! `[[rate_limits]]`.
//!
//! A stored limit applies to one *subject* — a stored key, a team, a tag or
//! an owner — optionally on one route, and its meter is named after that
//! subject (`budget/team=support/route=all/1d`), so every key of a team, on
//! every replica, books the same counter. A limit on a meter the config
//! also limits shares that meter (what was spent is one number); the
//! smaller limit applies.

use serde::Serialize;
use uuid::Uuid;

use super::{Hold, LimitKind, Window, limits::hold};
use crate::jobs::{Amounts, Payer};

/// What a stored limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    /// One stored key (`subject` is its id).
    Key,
    /// Every key of a team.
    Team,
    /// Every request that carries the tag.
    Tag,
    /// Every key of an owner, stored or configured.
    Owner,
}

impl LimitScope {
    pub const ALL: [LimitScope; 4] = [LimitScope::Key, LimitScope::Team, LimitScope::Tag, LimitScope::Owner];

    pub fn as_str(self) -> &'static str {
        match self {
            LimitScope::Key => "key",
            LimitScope::Team => "team",
            LimitScope::Tag => "tag",
            LimitScope::Owner => "owner",
        }
    }

    pub fn parse(text: &str) -> Option<LimitScope> {
        LimitScope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }
}

/// One stored budget or rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendLimit {
    pub id: Uuid,
    pub scope: LimitScope,
    pub subject: String,
    /// Only this route's requests; `None`: every route.
    pub route: Option<String>,
    pub kind: LimitKind,
    /// Nano-units for a budget; requests or tokens per minute for a rate.
    pub amount: i64,
    /// The budget's window; [`Window::Minute`] for a rate limit.
    pub window: Window,
    pub created_at_ms: i64,
    pub created_by: String,
    pub version: i64,
}

impl SpendLimit {
    /// Whether the limit counts a request of `payer` on `route`.
    pub fn applies(&self, payer: Payer<'_>, route: &str) -> bool {
        let subject = match self.scope {
            LimitScope::Key => payer.attribution.key_id.is_some_and(|id| id.to_string() == self.subject),
            LimitScope::Team => payer.attribution.team.as_deref() == Some(self.subject.as_str()),
            LimitScope::Tag => payer.attribution.tags.iter().any(|tag| tag == self.subject),
            LimitScope::Owner => payer.owner == self.subject,
        };
        subject && self.route.as_deref().is_none_or(|only| only == route)
    }

    /// The meter it books: the same for every limit on the same subject,
    /// route and window, whichever replica or rule books it.
    pub fn meter(&self) -> String {
        let kind = match self.kind {
            LimitKind::Budget => "budget",
            LimitKind::Requests => "rate-requests",
            LimitKind::Tokens => "rate-tokens",
        };
        let route = self.route.as_deref().unwrap_or("all");
        format!("{kind}/{}={}/route={route}/{}", self.scope.as_str(), self.subject, self.window.as_str())
    }

    /// Its hold for an attempt that reserves `reserved`.
    pub fn hold(&self, reserved: Amounts, now_ms: i64) -> Hold {
        let amount = match self.kind {
            LimitKind::Budget => reserved.nanos,
            LimitKind::Tokens => reserved.tokens,
            LimitKind::Requests => 1,
        };
        hold(self.kind, self.meter(), self.amount, self.window, amount, now_ms)
    }
}

/// One change to a stored limit, as its append-only audit records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitAudit {
    pub seq: i64,
    pub at_ms: i64,
    pub actor: String,
    /// `create`, `update` or `remove`.
    pub action: String,
    pub limit_id: Uuid,
    /// The fields the change set.
    pub changes: serde_json::Value,
}

/// The holds of the stored limits that apply to an attempt of `payer` on
/// `route`.
pub fn stored_holds(
    limits: &[SpendLimit],
    payer: Payer<'_>,
    route: &str,
    reserved: Amounts,
    now_ms: i64,
) -> Vec<Hold> {
    limits
        .iter()
        .filter(|limit| limit.applies(payer, route))
        .map(|limit| limit.hold(reserved, now_ms))
        .collect()
}

/// `holds` ordered by meter (so that concurrent writers lock meters in one
/// order), one per meter and window: where two rules share a meter, the
/// smaller limit.
pub fn merge_holds(mut holds: Vec<Hold>) -> Vec<Hold> {
    holds.sort_by(|a, b| (&a.meter, a.window_start_ms, a.limit).cmp(&(&b.meter, b.window_start_ms, b.limit)));
    holds.dedup_by(|later, kept| later.meter == kept.meter && later.window_start_ms == kept.window_start_ms);
    holds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{Attribution, Tags};

    fn limit(scope: LimitScope, subject: &str, kind: LimitKind, amount: i64, window: Window) -> SpendLimit {
        SpendLimit {
            id: Uuid::now_v7(),
            scope,
            subject: subject.into(),
            route: None,
            kind,
            amount,
            window,
            created_at_ms: 0,
            created_by: "test".into(),
            version: 0,
        }
    }

    #[test]
    fn a_limit_applies_to_its_subject_only() {
        let key = Uuid::now_v7();
        let attribution = Attribution {
            key_id: Some(key),
            team: Some("support".into()),
            tags: Tags::parse(["bot", "env=prod"]).unwrap(),
        };
        let payer = Payer { owner: "alice", attribution: &attribution };
        let budget = |scope, subject: &str| limit(scope, subject, LimitKind::Budget, 100, Window::Day);
        assert!(budget(LimitScope::Key, &key.to_string()).applies(payer, "chat"));
        assert!(budget(LimitScope::Team, "support").applies(payer, "chat"));
        assert!(budget(LimitScope::Tag, "env=prod").applies(payer, "chat"));
        assert!(budget(LimitScope::Owner, "alice").applies(payer, "chat"));
        assert!(!budget(LimitScope::Team, "sales").applies(payer, "chat"));
        assert!(!budget(LimitScope::Tag, "env").applies(payer, "chat"));
        let on_extract = SpendLimit { route: Some("extract".into()), ..budget(LimitScope::Team, "support") };
        assert!(!on_extract.applies(payer, "chat"));
        assert_eq!(on_extract.meter(), "budget/team=support/route=extract/1d");
    }

    #[test]
    fn shared_meters_keep_the_smaller_limit() {
        let reserved = Amounts { nanos: 10, tokens: 5 };
        let wide =
            limit(LimitScope::Team, "support", LimitKind::Budget, 1_000, Window::Day).hold(reserved, 0);
        let narrow =
            limit(LimitScope::Team, "support", LimitKind::Budget, 500, Window::Day).hold(reserved, 0);
        let rate =
            limit(LimitScope::Team, "support", LimitKind::Requests, 60, Window::Minute).hold(reserved, 0);
        let merged = merge_holds(vec![wide, rate.clone(), narrow]);
        assert_eq!(merged.len(), 2);
        assert_eq!(
            (merged[0].meter.as_str(), merged[0].limit, merged[0].amount),
            ("budget/team=support/route=all/1d", 500, 10)
        );
        assert_eq!(
            (merged[1].meter.as_str(), merged[1].amount),
            ("rate-requests/team=support/route=all/1m", 1)
        );
    }
}
