//! What the limit admin API reads and writes.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::super::{Problem, ProblemType};
use crate::budgets::{
    LimitAudit, LimitKind, LimitScope, SpendLimit, Window, decimal_to_nanos, nanos_to_decimal,
};
use crate::jobs::{Tags, rfc3339};

/// `POST /v1/admin/limits`: one of `budget`, `requests_per_minute` and
/// `tokens_per_minute`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateLimit {
    /// `key`, `team`, `tag` or `owner`.
    pub scope: String,
    /// The key's id, the team's, tag's or owner's name; `*`: each key,
    /// team, tag or owner its own share of the limit.
    pub subject: String,
    /// Only this route's requests; absent: every route.
    #[serde(default)]
    pub route: Option<String>,
    /// A spend budget in the configured currency (at most 9 decimals) per `window`.
    #[serde(default)]
    pub budget: Option<f64>,
    /// The budget's window: `1h`, `1d`, `30d` or `month`.
    #[serde(default)]
    pub window: Option<String>,
    /// Upstream calls per minute.
    #[serde(default)]
    pub requests_per_minute: Option<u64>,
    /// Tokens (prompt and completion) per minute.
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
}

fn invalid(path: &str, detail: impl Into<String>) -> Problem {
    Problem::new(ProblemType::InvalidBody, detail).titled("Invalid limit").with("path", path)
}

/// A budget in nano-units, or why it is not one.
fn budget_nanos(budget: f64) -> Result<i64, Problem> {
    decimal_to_nanos(budget)
        .ok_or_else(|| invalid("/budget", "`budget` must be a non-negative amount with at most 9 decimals"))
}

fn per_minute(path: &str, count: u64) -> Result<i64, Problem> {
    i64::try_from(count).map_err(|_| invalid(path, "too large"))
}

impl CreateLimit {
    /// The limit asked for, by `actor` at `now_ms`; its subject checked
    /// for form (whether a key or route exists is the handler's to check).
    pub fn limit(self, actor: String, now_ms: i64) -> Result<SpendLimit, Problem> {
        let scope = LimitScope::parse(&self.scope)
            .ok_or_else(|| invalid("/scope", "`scope` must be `key`, `team`, `tag` or `owner`"))?;
        check_subject(scope, &self.subject)?;
        let (kind, amount, window) = match (self.budget, self.requests_per_minute, self.tokens_per_minute) {
            (Some(budget), None, None) => {
                let window = self.window.ok_or_else(|| invalid("/window", "a budget needs its `window`"))?;
                let window = Window::try_from(window).map_err(|err| invalid("/window", err.to_string()))?;
                (LimitKind::Budget, budget_nanos(budget)?, window)
            }
            (None, Some(requests), None) if self.window.is_none() => {
                (LimitKind::Requests, per_minute("/requests_per_minute", requests)?, Window::Minute)
            }
            (None, None, Some(tokens)) if self.window.is_none() => {
                (LimitKind::Tokens, per_minute("/tokens_per_minute", tokens)?, Window::Minute)
            }
            _ => {
                return Err(invalid(
                    "",
                    "give one of `budget` (with `window`), `requests_per_minute` and `tokens_per_minute`",
                ));
            }
        };
        if let Some(route) = &self.route
            && (route.is_empty() || route.len() > 255)
        {
            return Err(invalid("/route", "`route` must be 1 to 255 characters"));
        }
        Ok(SpendLimit {
            id: Uuid::now_v7(),
            scope,
            subject: self.subject,
            route: self.route,
            kind,
            amount,
            window,
            created_at_ms: now_ms,
            created_by: actor,
            version: 0,
        })
    }
}

fn check_subject(scope: LimitScope, subject: &str) -> Result<(), Problem> {
    let fits = subject == "*"
        || match scope {
            LimitScope::Key => Uuid::parse_str(subject).is_ok(),
            LimitScope::Tag => Tags::parse([subject]).is_ok_and(|tags| tags.iter().count() == 1),
            LimitScope::Team | LimitScope::Owner => {
                !subject.is_empty() && subject.len() <= 255 && subject.trim() == subject
            }
        };
    if fits {
        return Ok(());
    }
    let expected = match scope {
        LimitScope::Key => "a stored key's id",
        LimitScope::Tag => "one tag (letters, digits and `-_.:/=@`, at most 64)",
        LimitScope::Team | LimitScope::Owner => "a name of 1 to 255 characters",
    };
    let expected = format!("{expected}, or `*` (each its own share)");
    Err(invalid("/subject", format!("`subject` must be {expected}")))
}

/// `PATCH /v1/admin/limits/{id}`: the new amount, in the limit's own unit.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateLimit {
    #[serde(default)]
    pub budget: Option<f64>,
    #[serde(default)]
    pub requests_per_minute: Option<u64>,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
}

impl UpdateLimit {
    /// The new amount for `limit`, which must be of the kind given.
    pub fn amount(&self, limit: &SpendLimit) -> Result<i64, Problem> {
        match (limit.kind, self.budget, self.requests_per_minute, self.tokens_per_minute) {
            (LimitKind::Budget, Some(budget), None, None) => budget_nanos(budget),
            (LimitKind::Requests, None, Some(requests), None) => per_minute("/requests_per_minute", requests),
            (LimitKind::Tokens, None, None, Some(tokens)) => per_minute("/tokens_per_minute", tokens),
            _ => Err(invalid("", format!("this limit is a {}: give that field alone", field_of(limit.kind)))),
        }
    }
}

fn field_of(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::Budget => "`budget`",
        LimitKind::Requests => "`requests_per_minute`",
        LimitKind::Tokens => "`tokens_per_minute`",
    }
}

/// A stored limit and where its meter stands in the current window.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LimitView {
    pub id: Uuid,
    pub scope: LimitScope,
    pub subject: String,
    pub route: Option<String>,
    /// `budget`, `requests` or `tokens`.
    pub kind: &'static str,
    /// `1h`, `1d`, `30d`, `month`; `1m` for a rate limit.
    pub window: &'static str,
    /// The budget in the currency, or the rate per minute.
    pub limit: f64,
    /// Exactly: nano-units, or the rate.
    pub limit_exact: i64,
    /// The meter it books (shared by every rule on the same subject, route
    /// and window).
    pub meter: String,
    /// Charged (or counted) in the current window, exactly.
    pub used_exact: i64,
    /// Reserved by attempts still open, exactly.
    pub reserved_exact: i64,
    pub resets_at: String,
    pub created_at: String,
    pub created_by: String,
    pub version: i64,
}

impl LimitView {
    /// `limit` with its meter's `(used, held)` in the window at `now_ms`.
    pub fn new(limit: &SpendLimit, (used, held): (i64, i64), now_ms: i64) -> LimitView {
        let as_number = |exact: i64| match limit.kind {
            LimitKind::Budget => nanos_to_decimal(exact),
            #[allow(clippy::cast_precision_loss)]
            LimitKind::Requests | LimitKind::Tokens => exact as f64,
        };
        LimitView {
            id: limit.id,
            scope: limit.scope,
            subject: limit.subject.clone(),
            route: limit.route.clone(),
            kind: limit.kind.name(),
            window: limit.window.as_str(),
            limit: as_number(limit.amount),
            limit_exact: limit.amount,
            meter: limit.meter(),
            used_exact: used,
            reserved_exact: held,
            resets_at: rfc3339(limit.window.bounds(now_ms).1),
            created_at: rfc3339(limit.created_at_ms),
            created_by: limit.created_by.clone(),
            version: limit.version,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LimitList {
    pub limits: Vec<LimitView>,
}

/// `GET /v1/admin/limits/audit`: `after` a `seq`, at most `limit` entries.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries after this `seq` (0: from the first).
    #[serde(default)]
    pub after: i64,
    /// At most this many (100 by default, 1000 at most).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LimitAuditList {
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<LimitAudit>,
    /// Give it as `after` for the next page; absent on the last.
    pub next_after: Option<i64>,
}
