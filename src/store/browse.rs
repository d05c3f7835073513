//! Reads for people looking at the gateway (the operator console and any
//! API client): a page of jobs under filters, the counts that need
//! attention, the queue of `unknown` attempts and per-minute activity.
//!
//! Every read takes the owner to scope by (`None` for an admin, who sees
//! every owner): the owner is part of each query's WHERE, as in
//! [`Store::job_for_owner`], so another owner's rows are never loaded. The
//! SQL is the same on both backends (`$N` placeholders, integer division
//! for minute buckets, `CAST(.. AS TEXT)` so PostgreSQL knows the type of a
//! NULL filter).

use uuid::Uuid;

use super::rows::AttemptRow;
use super::{Store, StoreError};
use crate::jobs::{Attempt, AttemptState, JobStatus};

/// The filters of a page of jobs. Every `None` is "any".
#[derive(Debug, Clone, Default)]
pub struct JobQuery {
    /// Jobs of this owner only; `None` for every owner (admins).
    pub owner: Option<String>,
    pub status: Option<JobStatus>,
    pub route: Option<String>,
    /// Jobs with at least one attempt on this provider.
    pub provider: Option<String>,
    pub idempotency_key: Option<String>,
    /// Created at or after (unix ms).
    pub created_from_ms: Option<i64>,
    /// Created before (unix ms).
    pub created_until_ms: Option<i64>,
    /// Keyset pagination: only jobs whose id is lower than this one. UUIDv7
    /// ids sort by creation time, so "newest first" is `ORDER BY id DESC`
    /// and the next page starts below the last id of this one: no OFFSET,
    /// no page drifting when new jobs arrive meanwhile.
    pub before: Option<Uuid>,
    pub limit: i64,
}

/// One row of a jobs page: what a list shows, without the request and
/// result bodies (those are read per job).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobSummary {
    pub id: Uuid,
    pub owner_id: String,
    pub idempotency_key: String,
    pub route: String,
    pub status: String,
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub attempt_count: i64,
    /// The provider of the latest attempt, if any.
    pub last_provider: Option<String>,
}

/// An `unknown` attempt waiting to be settled, with its job's context.
#[derive(Debug, Clone)]
pub struct UnknownAttempt {
    pub attempt: Attempt,
    pub owner: String,
    pub route: String,
    pub idempotency_key: String,
}

/// How many of one kind of thing happened in one minute.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct MinuteCount {
    /// Unix minutes (ms / 60 000).
    pub minute: i64,
    /// A job status, or an attempt outcome (`open` while it has none).
    pub label: String,
    pub count: i64,
}

/// The largest UUID: "before" it is every job.
const NO_CURSOR: Uuid = Uuid::max();

const SELECT_JOB_PAGE: &str = "SELECT id, owner_id, idempotency_key, route, status, version, created_at, updated_at, \
     (SELECT COUNT(*) FROM attempts a WHERE a.job_id = jobs.id) AS attempt_count, \
     (SELECT a.provider FROM attempts a WHERE a.job_id = jobs.id ORDER BY a.number DESC LIMIT 1) AS last_provider \
     FROM jobs \
     WHERE id < $1 \
       AND (CAST($2 AS TEXT) IS NULL OR owner_id = CAST($2 AS TEXT)) \
       AND (CAST($3 AS TEXT) IS NULL OR status = CAST($3 AS TEXT)) \
       AND (CAST($4 AS TEXT) IS NULL OR route = CAST($4 AS TEXT)) \
       AND (CAST($5 AS TEXT) IS NULL OR EXISTS (SELECT 1 FROM attempts p \
            WHERE p.job_id = jobs.id AND p.provider = CAST($5 AS TEXT))) \
       AND (CAST($6 AS TEXT) IS NULL OR idempotency_key = CAST($6 AS TEXT)) \
       AND (CAST($7 AS BIGINT) IS NULL OR created_at >= CAST($7 AS BIGINT)) \
       AND (CAST($8 AS BIGINT) IS NULL OR created_at < CAST($8 AS BIGINT)) \
     ORDER BY id DESC LIMIT $9";

const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM jobs \
     WHERE status IN ('running', 'unknown') AND (CAST($1 AS TEXT) IS NULL OR owner_id = CAST($1 AS TEXT)) \
     GROUP BY status";

const JOBS_PER_MINUTE: &str = "SELECT created_at / 60000 AS minute, status AS label, COUNT(*) AS count FROM jobs \
     WHERE created_at >= $1 AND (CAST($2 AS TEXT) IS NULL OR owner_id = CAST($2 AS TEXT)) \
     GROUP BY created_at / 60000, status ORDER BY minute, label";

const ATTEMPTS_PER_MINUTE: &str = "SELECT a.started_at / 60000 AS minute, COALESCE(a.outcome, 'open') AS label, \
     COUNT(*) AS count FROM attempts a JOIN jobs j ON j.id = a.job_id \
     WHERE a.started_at >= $1 AND (CAST($2 AS TEXT) IS NULL OR j.owner_id = CAST($2 AS TEXT)) \
     GROUP BY a.started_at / 60000, COALESCE(a.outcome, 'open') ORDER BY minute, label";

impl Store {
    /// One page of jobs, newest first, under `query`'s filters.
    pub async fn job_page(&self, query: &JobQuery) -> Result<Vec<JobSummary>, StoreError> {
        let args = vec![
            query.before.unwrap_or(NO_CURSOR).into(),
            query.owner.as_deref().into(),
            query.status.map(JobStatus::as_str).into(),
            query.route.as_deref().into(),
            query.provider.as_deref().into(),
            query.idempotency_key.as_deref().into(),
            query.created_from_ms.into(),
            query.created_until_ms.into(),
            query.limit.into(),
        ];
        self.read_all(SELECT_JOB_PAGE, args, JobSummary::from_sqlite).await
    }

    /// Jobs `running` and `unknown` right now (of `owner`, or all).
    pub async fn attention_counts(&self, owner: Option<&str>) -> Result<(i64, i64), StoreError> {
        let rows: Vec<(String, i64)> =
            self.read_all(COUNT_BY_STATUS, vec![owner.into()], |row| Ok((row.get(0)?, row.get(1)?))).await?;
        let count = |status: JobStatus| {
            rows.iter().find(|(s, _)| s == status.as_str()).map_or(0, |(_, count)| *count)
        };
        Ok((count(JobStatus::Running), count(JobStatus::Unknown)))
    }

    /// Attempts `unknown` right now, the longest open first (of `owner`'s
    /// jobs, or all), at most `limit`.
    pub async fn unknown_queue(
        &self,
        owner: Option<&str>,
        limit: i64,
    ) -> Result<Vec<UnknownAttempt>, StoreError> {
        let rows: Vec<QueueRow> = self
            .read_all(
                super::sql::SELECT_UNKNOWN_QUEUE,
                vec![owner.into(), limit.into()],
                QueueRow::from_sqlite,
            )
            .await?;
        rows.into_iter()
            .map(|row| {
                let attempt = Attempt::try_from(row.attempt)?;
                debug_assert_eq!(attempt.state, AttemptState::Unknown);
                Ok(UnknownAttempt {
                    attempt,
                    owner: row.owner_id,
                    route: row.route,
                    idempotency_key: row.idempotency_key,
                })
            })
            .collect()
    }

    /// Jobs created per minute by status, and attempts started per minute
    /// by outcome, since `since_ms` (of `owner`, or all).
    pub async fn activity_since(
        &self,
        since_ms: i64,
        owner: Option<&str>,
    ) -> Result<(Vec<MinuteCount>, Vec<MinuteCount>), StoreError> {
        let jobs = self
            .read_all(JOBS_PER_MINUTE, vec![since_ms.into(), owner.into()], MinuteCount::from_sqlite)
            .await?;
        let attempts = self
            .read_all(ATTEMPTS_PER_MINUTE, vec![since_ms.into(), owner.into()], MinuteCount::from_sqlite)
            .await?;
        Ok((jobs, attempts))
    }
}

/// An attempt row (the columns of `attempt_columns!`, in order) and three
/// columns of its job.
#[derive(Debug, sqlx::FromRow)]
struct QueueRow {
    #[sqlx(flatten)]
    attempt: AttemptRow,
    owner_id: String,
    route: String,
    idempotency_key: String,
}

impl QueueRow {
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<QueueRow> {
        Ok(QueueRow {
            attempt: AttemptRow::from_sqlite(row)?,
            owner_id: row.get(AttemptRow::COLUMNS)?,
            route: row.get(AttemptRow::COLUMNS + 1)?,
            idempotency_key: row.get(AttemptRow::COLUMNS + 2)?,
        })
    }
}

impl JobSummary {
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<JobSummary> {
        Ok(JobSummary {
            id: row.get(0)?,
            owner_id: row.get(1)?,
            idempotency_key: row.get(2)?,
            route: row.get(3)?,
            status: row.get(4)?,
            version: row.get(5)?,
            created_at: row.get(6)?,
            updated_at: row.get(7)?,
            attempt_count: row.get(8)?,
            last_provider: row.get(9)?,
        })
    }
}

impl MinuteCount {
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<MinuteCount> {
        Ok(MinuteCount { minute: row.get(0)?, label: row.get(1)?, count: row.get(2)? })
    }
}
