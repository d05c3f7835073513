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
        self.on_route(route) && !self.shares(payer).is_empty()
    }

    fn on_route(&self, route: &str) -> bool {
        self.route.as_deref().is_none_or(|only| only == route)
    }

    /// Whose share of the limit a request of `payer` counts in: its key,
    /// team or owner, or each of its tags, when it is the limit's subject —
    /// or any, for a subject of `*` (each one its own share).
    fn shares(&self, payer: Payer<'_>) -> Vec<String> {
        let any = self.subject == "*";
        let chosen = |value: &str| any || value == self.subject;
        let attribution = payer.attribution;
        match self.scope {
            LimitScope::Key => {
                attribution.key_id.map(|id| id.to_string()).filter(|id| chosen(id)).into_iter().collect()
            }
            LimitScope::Team => attribution.team.iter().filter(|team| chosen(team)).cloned().collect(),
            LimitScope::Tag => attribution.tags.iter().filter(|tag| chosen(tag)).map(str::to_owned).collect(),
            LimitScope::Owner => {
                Some(payer.owner).filter(|owner| chosen(owner)).map(str::to_owned).into_iter().collect()
            }
        }
    }

    /// The meter it books for `share`: the same for every limit on the
    /// same subject, route and window, whichever replica or rule books it.
    fn meter_of(&self, share: &str) -> String {
        let kind = match self.kind {
            LimitKind::Budget => "budget",
            LimitKind::Requests => "rate-requests",
            LimitKind::Tokens => "rate-tokens",
        };
        let route = self.route.as_deref().unwrap_or("all");
        format!("{kind}/{}={share}/route={route}/{}", self.scope.as_str(), self.window.as_str())
    }

    /// Its meter, named after its subject (`…/team=*/…` for every team's
    /// share: a pattern, not one meter).
    pub fn meter(&self) -> String {
        self.meter_of(&self.subject)
    }

    /// The meters `payer`'s requests on `route` book, one per share.
    pub fn meters_of(&self, payer: Payer<'_>, route: &str) -> Vec<String> {
        if !self.on_route(route) {
            return Vec::new();
        }
        self.shares(payer).iter().map(|share| self.meter_of(share)).collect()
    }

    /// Its holds for an attempt of `payer` on `route` that reserves
    /// `reserved`: one per share.
    pub fn holds(&self, payer: Payer<'_>, route: &str, reserved: Amounts, now_ms: i64) -> Vec<Hold> {
        let amount = match self.kind {
            LimitKind::Budget => reserved.nanos,
            LimitKind::Tokens => reserved.tokens,
            LimitKind::Requests => 1,
        };
        self.meters_of(payer, route)
            .into_iter()
            .map(|meter| hold(self.kind, meter, self.amount, self.window, amount, now_ms))
            .collect()
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
    limits.iter().flat_map(|limit| limit.holds(payer, route, reserved, now_ms)).collect()
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
    fn a_star_gives_each_its_own_share() {
        let tags = Tags::parse(["a", "b"]).unwrap();
        let attribution = Attribution { key_id: None, team: Some("support".into()), tags };
        let payer = Payer { owner: "alice", attribution: &attribution };
        let every_tag = limit(LimitScope::Tag, "*", LimitKind::Budget, 100, Window::Day);
        assert_eq!(
            every_tag.meters_of(payer, "chat"),
            ["budget/tag=a/route=all/1d", "budget/tag=b/route=all/1d"]
        );
        let every_team = limit(LimitScope::Team, "*", LimitKind::Requests, 60, Window::Minute);
        assert_eq!(every_team.meters_of(payer, "chat"), ["rate-requests/team=support/route=all/1m"]);
        let every_key = limit(LimitScope::Key, "*", LimitKind::Budget, 100, Window::Day);
        assert!(!every_key.applies(payer, "chat"), "a config principal has no key to share by");
        assert_eq!(every_team.meter(), "rate-requests/team=*/route=all/1m", "the pattern");
    }

    #[test]
    fn shared_meters_keep_the_smaller_limit() {
        let reserved = Amounts { nanos: 10, tokens: 5 };
        let attribution = Attribution { team: Some("support".into()), ..Attribution::default() };
        let payer = Payer { owner: "alice", attribution: &attribution };
        let one = |limit: SpendLimit| limit.holds(payer, "chat", reserved, 0).remove(0);
        let wide = one(limit(LimitScope::Team, "support", LimitKind::Budget, 1_000, Window::Day));
        let narrow = one(limit(LimitScope::Team, "support", LimitKind::Budget, 500, Window::Day));
        let rate = one(limit(LimitScope::Team, "support", LimitKind::Requests, 60, Window::Minute));
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
