//! Stored budgets and rate limits (`spend_limits`) and their audit. Every
//! change is one conditional write naming the version it read, with its
//! audit entry in the same transaction; the schema keeps a limit's subject
//! immutable, a removal final and the audit append-only (migrations
//! `*_spend_attribution_and_limits.sql`).

use serde_json::{Value, json};
use uuid::Uuid;

use super::exec::{Arg, Step};
use super::rows::AuditRow;
use super::{Store, StoreError};
use crate::budgets::{LimitAudit, LimitKind, LimitScope, SpendLimit, Window};

macro_rules! limit_columns {
    () => {
        "id, scope, subject, route, kind, amount, period, created_at, created_by, version"
    };
}

const INSERT_LIMIT: &str = "INSERT INTO spend_limits (id, scope, subject, route, kind, amount, period, \
     created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const UPDATE_LIMIT: &str = "UPDATE spend_limits SET amount = $3, version = version + 1 \
     WHERE id = $1 AND version = $2 AND removed_at IS NULL";
const REMOVE_LIMIT: &str = "UPDATE spend_limits SET removed_at = $3, version = version + 1 \
     WHERE id = $1 AND version = $2 AND removed_at IS NULL";
const INSERT_AUDIT: &str =
    "INSERT INTO limit_audit (at, actor, action, limit_id, changes) VALUES ($1, $2, $3, $4, $5)";
const SELECT_LIMITS: &str = concat!(
    "SELECT ",
    limit_columns!(),
    " FROM spend_limits WHERE removed_at IS NULL ORDER BY created_at, id"
);
const SELECT_LIMIT: &str =
    concat!("SELECT ", limit_columns!(), " FROM spend_limits WHERE id = $1 AND removed_at IS NULL");
const SELECT_AUDIT: &str = "SELECT seq, at, actor, action, limit_id AS subject, changes FROM limit_audit \
     WHERE seq > $1 ORDER BY seq LIMIT $2";
const SELECT_AUDIT_HEAD: &str = "SELECT COALESCE(MAX(seq), 0) FROM limit_audit";

impl Store {
    /// Writes a new limit and its `create` entry.
    pub async fn insert_spend_limit(&self, limit: &SpendLimit) -> Result<(), StoreError> {
        let args = vec![
            limit.id.into(),
            limit.scope.as_str().into(),
            limit.subject.as_str().into(),
            limit.route.as_deref().into(),
            limit.kind.name().into(),
            limit.amount.into(),
            limit.window.as_str().into(),
            limit.created_at_ms.into(),
            limit.created_by.as_str().into(),
        ];
        let changes = json!({
            "scope": limit.scope.as_str(), "subject": limit.subject, "route": limit.route,
            "kind": limit.kind.name(), "amount": limit.amount, "window": limit.window.as_str(),
        });
        let audit = audit(limit.created_at_ms, &limit.created_by, "create", limit.id, &changes);
        self.execute_guarded(vec![(INSERT_LIMIT, args), audit]).await?;
        Ok(())
    }

    /// Sets the amount of `limit` (read at its `version`); false when it
    /// changed meanwhile or was removed.
    pub async fn update_spend_limit(
        &self,
        limit: &SpendLimit,
        amount: i64,
        actor: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let update = (UPDATE_LIMIT, vec![limit.id.into(), limit.version.into(), amount.into()]);
        let audit = audit(now_ms, actor, "update", limit.id, &json!({"amount": amount}));
        self.execute_guarded(vec![update, audit]).await
    }

    /// Removes `limit` (read at its `version`); false when it changed
    /// meanwhile or was removed already.
    pub async fn remove_spend_limit(
        &self,
        limit: &SpendLimit,
        actor: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let remove = (REMOVE_LIMIT, vec![limit.id.into(), limit.version.into(), now_ms.into()]);
        let audit = audit(now_ms, actor, "remove", limit.id, &json!({}));
        self.execute_guarded(vec![remove, audit]).await
    }

    /// Every limit in force, oldest first.
    pub async fn spend_limits(&self) -> Result<Vec<SpendLimit>, StoreError> {
        let rows = self.read_all(SELECT_LIMITS, vec![], LimitRow::from_sqlite).await?;
        rows.into_iter().map(SpendLimit::try_from).collect()
    }

    /// The limit `id`, if it is in force.
    pub async fn spend_limit(&self, id: Uuid) -> Result<Option<SpendLimit>, StoreError> {
        let row = self.read_optional(SELECT_LIMIT, vec![id.into()], LimitRow::from_sqlite).await?;
        row.map(SpendLimit::try_from).transpose()
    }

    /// Up to `limit` audit entries after `after_seq`, in the order written.
    pub async fn limit_audit(&self, after_seq: i64, limit: i64) -> Result<Vec<LimitAudit>, StoreError> {
        let rows =
            self.read_all(SELECT_AUDIT, vec![after_seq.into(), limit.into()], AuditRow::from_sqlite).await?;
        rows.into_iter().map(LimitAudit::try_from).collect()
    }

    /// The `seq` of the latest limit audit entry (0 when there is none).
    pub async fn limit_audit_head(&self) -> Result<i64, StoreError> {
        let row = self.read_optional(SELECT_AUDIT_HEAD, vec![], super::rows::first::<i64>).await?;
        Ok(row.map_or(0, |(seq,)| seq))
    }
}

fn audit(at_ms: i64, actor: &str, action: &str, limit_id: Uuid, changes: &Value) -> Step {
    let args = vec![
        at_ms.into(),
        actor.into(),
        action.into(),
        limit_id.into(),
        Arg::Text(Some(changes.to_string())),
    ];
    (INSERT_AUDIT, args)
}

fn corrupt(what: &str, value: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("spend limit {what}: {value}"))
}

#[derive(Debug, sqlx::FromRow)]
struct LimitRow {
    id: Uuid,
    scope: String,
    subject: String,
    route: Option<String>,
    kind: String,
    amount: i64,
    period: String,
    created_at: i64,
    created_by: String,
    version: i64,
}

impl LimitRow {
    /// Columns by position, in the order of `limit_columns!`.
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<LimitRow> {
        Ok(LimitRow {
            id: row.get(0)?,
            scope: row.get(1)?,
            subject: row.get(2)?,
            route: row.get(3)?,
            kind: row.get(4)?,
            amount: row.get(5)?,
            period: row.get(6)?,
            created_at: row.get(7)?,
            created_by: row.get(8)?,
            version: row.get(9)?,
        })
    }
}

impl TryFrom<LimitRow> for SpendLimit {
    type Error = StoreError;

    fn try_from(row: LimitRow) -> Result<Self, Self::Error> {
        let kind = match row.kind.as_str() {
            "budget" => LimitKind::Budget,
            "requests" => LimitKind::Requests,
            "tokens" => LimitKind::Tokens,
            other => return Err(corrupt("kind", other)),
        };
        let window = match row.period.as_str() {
            "1m" => Window::Minute,
            other => Window::try_from(other.to_owned()).map_err(|err| corrupt("period", err))?,
        };
        Ok(SpendLimit {
            id: row.id,
            scope: LimitScope::parse(&row.scope).ok_or_else(|| corrupt("scope", &row.scope))?,
            subject: row.subject,
            route: row.route,
            kind,
            amount: row.amount,
            window,
            created_at_ms: row.created_at,
            created_by: row.created_by,
            version: row.version,
        })
    }
}

impl TryFrom<AuditRow> for LimitAudit {
    type Error = StoreError;

    fn try_from(row: AuditRow) -> Result<Self, Self::Error> {
        Ok(LimitAudit {
            seq: row.seq,
            at_ms: row.at,
            actor: row.actor,
            action: row.action,
            limit_id: row.subject,
            changes: serde_json::from_str(&row.changes).map_err(|err| corrupt("audit changes", err))?,
        })
    }
}
