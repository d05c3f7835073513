//! Row shapes shared by both backends, and their conversion into the domain.
//! The same Rust types decode from SQLite (BLOB uuid, INTEGER) and
//! PostgreSQL (UUID, BIGINT), so one struct serves both.

use uuid::Uuid;

use super::StoreError;
use crate::jobs::{Amounts, Attempt, Attribution, Fingerprint, Job, Sent, Tags};

#[derive(Debug, sqlx::FromRow)]
pub(super) struct JobRow {
    id: Uuid,
    owner_id: String,
    idempotency_key: String,
    fingerprint: String,
    route: String,
    request: String,
    status: String,
    version: i64,
    completed_by: Option<Uuid>,
    result: Option<String>,
    error: Option<String>,
    created_at: i64,
    updated_at: i64,
    key_id: Option<Uuid>,
    team: Option<String>,
    tags: Option<String>,
    entered_through: Option<String>,
}

impl TryFrom<JobRow> for Job {
    type Error = StoreError;

    fn try_from(row: JobRow) -> Result<Self, Self::Error> {
        Ok(Job {
            id: row.id,
            owner: row.owner_id,
            idempotency_key: row.idempotency_key,
            fingerprint: Fingerprint::from_stored(row.fingerprint),
            route: row.route,
            request: row.request,
            status: row.status.parse().map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            version: row.version,
            completed_by: row.completed_by,
            result: row.result,
            error: row.error,
            created_at_ms: row.created_at,
            updated_at_ms: row.updated_at,
            attribution: Attribution {
                key_id: row.key_id,
                team: row.team,
                tags: Tags::from_stored(row.tags.as_deref())
                    .map_err(|e| StoreError::Corrupt(format!("a job's tags: {e}")))?,
            },
            entered_through: row
                .entered_through
                .map(|door| door.parse())
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(super) struct AttemptRow {
    id: Uuid,
    job_id: Uuid,
    number: i32,
    provider: String,
    state: String,
    job_version: i64,
    outcome: Option<String>,
    detail: Option<String>,
    resolved_by: Option<String>,
    started_at: i64,
    finished_at: Option<i64>,
    reserved_nanos: i64,
    reserved_tokens: i64,
    cost_nanos: Option<i64>,
    tokens: Option<i64>,
    usage: Option<String>,
    lane: i32,
    unknown_at: Option<i64>,
    sent: Option<bool>,
    sent_at: Option<i64>,
    continues: Option<i32>,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StoreError;

    fn try_from(row: AttemptRow) -> Result<Self, Self::Error> {
        Ok(Attempt {
            id: row.id,
            job_id: row.job_id,
            number: row.number,
            provider: row.provider,
            state: row.state.parse().map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            job_version: row.job_version,
            outcome: row
                .outcome
                .map(|o| o.parse())
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            detail: row.detail,
            resolved_by: row.resolved_by,
            started_at_ms: row.started_at,
            finished_at_ms: row.finished_at,
            reserved: Amounts { nanos: row.reserved_nanos, tokens: row.reserved_tokens },
            charged: match (row.cost_nanos, row.tokens) {
                (Some(nanos), Some(tokens)) => Some(Amounts { nanos, tokens }),
                _ => None,
            },
            usage: row.usage,
            lane: row.lane,
            unknown_at_ms: row.unknown_at,
            sent: Sent::of_columns(row.sent, row.sent_at).map_err(|e| StoreError::Corrupt(format!("{e}")))?,
            continues: row.continues,
        })
    }
}

// On the SQLite writer's own connection (rusqlite), columns are read by
// position, in the order of `job_columns!` / `attempt_columns!`.

impl JobRow {
    pub(super) fn id(&self) -> Uuid {
        self.id
    }

    pub(super) fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
        Ok(JobRow {
            id: row.get(0)?,
            owner_id: row.get(1)?,
            idempotency_key: row.get(2)?,
            fingerprint: row.get(3)?,
            route: row.get(4)?,
            request: row.get(5)?,
            status: row.get(6)?,
            version: row.get(7)?,
            completed_by: row.get(8)?,
            result: row.get(9)?,
            error: row.get(10)?,
            created_at: row.get(11)?,
            updated_at: row.get(12)?,
            key_id: row.get(13)?,
            team: row.get(14)?,
            tags: row.get(15)?,
            entered_through: row.get(16)?,
        })
    }
}

impl AttemptRow {
    /// How many columns `attempt_columns!` selects: a query that selects
    /// more reads them from here on.
    pub(super) const COLUMNS: usize = 21;

    pub(super) fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<AttemptRow> {
        Ok(AttemptRow {
            id: row.get(0)?,
            job_id: row.get(1)?,
            number: row.get(2)?,
            provider: row.get(3)?,
            state: row.get(4)?,
            job_version: row.get(5)?,
            outcome: row.get(6)?,
            detail: row.get(7)?,
            resolved_by: row.get(8)?,
            started_at: row.get(9)?,
            finished_at: row.get(10)?,
            reserved_nanos: row.get(11)?,
            reserved_tokens: row.get(12)?,
            cost_nanos: row.get(13)?,
            tokens: row.get(14)?,
            usage: row.get(15)?,
            lane: row.get(16)?,
            unknown_at: row.get(17)?,
            sent: row.get(18)?,
            sent_at: row.get(19)?,
            continues: row.get(20)?,
        })
    }
}

/// One entry of an append-only audit (`key_audit`, `limit_audit`): the
/// row each reads, its subject's id column selected as `subject`.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct AuditRow {
    pub seq: i64,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub subject: Uuid,
    pub changes: String,
}

impl AuditRow {
    pub(super) fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<AuditRow> {
        Ok(AuditRow {
            seq: row.get(0)?,
            at: row.get(1)?,
            actor: row.get(2)?,
            action: row.get(3)?,
            subject: row.get(4)?,
            changes: row.get(5)?,
        })
    }
}

/// A one-column row, as a 1-tuple (which sqlx decodes too).
pub(super) fn first<T: rusqlite::types::FromSql>(row: &rusqlite::Row<'_>) -> rusqlite::Result<(T,)> {
    Ok((row.get(0)?,))
}
