//! Attempt rows: the guarded start (R4), settling, the result
//! compare-and-swap (R6, R7) and recovery.

use uuid::Uuid;

use super::rows::AttemptRow;
use super::{Store, StoreError, sql};
use crate::jobs::{Attempt, AttemptState, JobStatus, StartBlocked, may_start_attempt};

/// What `start_attempt` did.
#[derive(Debug, Clone)]
pub enum StartOutcome {
    /// The attempt row is committed as `starting`; its request may now leave.
    Started(Attempt),
    /// R4 refused it: the domain said so, or the partial unique index did.
    Blocked(StartBlocked),
}

/// What the compare-and-swap of a result did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CasOutcome {
    /// This attempt's result is the job's result.
    Won,
    /// Another attempt completed the job first (or it was closed): this
    /// result stays on the attempt, marked `superseded`, for audit only.
    Superseded { winner: Option<Uuid> },
    /// The attempt had already been settled as `failed`: it cannot deliver.
    NotDeliverable,
}

/// How an attempt leaves an open state.
#[derive(Debug, Clone, Copy)]
pub struct Settle<'a> {
    pub from: AttemptState,
    pub to: AttemptState,
    pub outcome: Option<&'a str>,
    pub detail: Option<&'a str>,
    pub response: Option<&'a str>,
    pub resolved_by: Option<&'a str>,
}

impl Store {
    /// Every attempt of a job, in the order they started.
    pub async fn attempts(&self, job_id: Uuid) -> Result<Vec<Attempt>, StoreError> {
        let rows: Vec<AttemptRow> = on_reader!(self, pool => {
            sqlx::query_as(sql::SELECT_ATTEMPTS).bind(job_id).fetch_all(pool).await
        })?;
        rows.into_iter().map(Attempt::try_from).collect()
    }

    pub async fn attempt(&self, job_id: Uuid, number: i32) -> Result<Option<Attempt>, StoreError> {
        let row: Option<AttemptRow> = on_reader!(self, pool => {
            sqlx::query_as(sql::SELECT_ATTEMPT).bind(job_id).bind(number).fetch_optional(pool).await
        })?;
        row.map(Attempt::try_from).transpose()
    }

    /// R4: writes attempt `starting` (with the job version it read) and moves
    /// the job to `running`, in one transaction — or says why not. The domain
    /// answers first; if two drivers race past it, the partial unique index
    /// `attempts_one_open_per_job` (or `UNIQUE (job_id, number)`) refuses the
    /// second insert and this returns `Blocked` for it too.
    pub async fn start_attempt(
        &self,
        job_id: Uuid,
        provider: &str,
        now_ms: i64,
    ) -> Result<StartOutcome, StoreError> {
        let outcome = in_write_tx!(self, tx => {
            let Some(job) = sqlx::query_as::<_, super::rows::JobRow>(sql::SELECT_JOB_BY_ID)
                .bind(job_id)
                .fetch_optional(&mut *tx)
                .await?
            else {
                return Err(StoreError::Corrupt(format!("attempt for missing job {job_id}")));
            };
            let job = crate::jobs::Job::try_from(job)?;
            let attempts: Vec<Attempt> = sqlx::query_as::<_, AttemptRow>(sql::SELECT_ATTEMPTS)
                .bind(job_id)
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(Attempt::try_from)
                .collect::<Result<_, _>>()?;
            if let Err(blocked) = may_start_attempt(job.status, &attempts) {
                return Ok(StartOutcome::Blocked(blocked));
            }
            let number: i32 = attempts.last().map_or(1, |a| a.number + 1);
            let inserted = sqlx::query_as::<_, AttemptRow>(sql::INSERT_ATTEMPT)
                .bind(Uuid::now_v7())
                .bind(job_id)
                .bind(number)
                .bind(provider)
                .bind(job.version)
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await;
            let attempt = match inserted {
                Ok(row) => Attempt::try_from(row)?,
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    // A racing driver inserted first; its attempt is open.
                    return Ok(StartOutcome::Blocked(StartBlocked::InFlight { attempt_id: Uuid::nil(), number }));
                }
                Err(err) => return Err(err.into()),
            };
            if job.status != JobStatus::Running {
                sqlx::query(sql::SET_JOB_STATUS)
                    .bind(job_id)
                    .bind(job.status.as_str())
                    .bind(JobStatus::Running.as_str())
                    .bind(None::<&str>)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            StartOutcome::Started(attempt)
        });
        Ok(outcome)
    }

    /// Moves one attempt along `settle.from → settle.to`; false when it was
    /// no longer in `settle.from` (someone else settled it first).
    pub async fn settle_attempt(
        &self,
        id: Uuid,
        settle: Settle<'_>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        debug_assert!(settle.from.can_become(settle.to), "{} → {}", settle.from, settle.to);
        let finished_at = (!settle.to.is_open()).then_some(now_ms);
        let rows = on_pool!(self, pool => {
            sqlx::query(sql::SETTLE_ATTEMPT)
                .bind(id)
                .bind(settle.from.as_str())
                .bind(settle.to.as_str())
                .bind(settle.outcome)
                .bind(settle.detail)
                .bind(settle.response)
                .bind(settle.resolved_by)
                .bind(finished_at)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(rows == 1)
    }

    /// R6/R7: the attempt's result becomes the job's result only through the
    /// conditional UPDATE on `(id, version, completed_by IS NULL)`. The loser
    /// keeps its payload on its own row as `superseded`; nothing is merged.
    pub async fn complete_job(
        &self,
        attempt: &Attempt,
        result: &str,
        raw_response: &str,
        now_ms: i64,
    ) -> Result<CasOutcome, StoreError> {
        let outcome = in_write_tx!(self, tx => {
            let state: Option<String> = sqlx::query_scalar(sql::LOCK_DELIVERABLE_ATTEMPT)
                .bind(attempt.id)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(state) = state else {
                return Ok(CasOutcome::NotDeliverable);
            };
            let from: AttemptState = state.parse().map_err(|e| StoreError::Corrupt(format!("{e}")))?;
            let won = sqlx::query(sql::COMPLETE_JOB_CAS)
                .bind(attempt.job_id)
                .bind(attempt.job_version)
                .bind(result)
                .bind(attempt.id)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                == 1;
            let to = if won { AttemptState::Succeeded } else { AttemptState::Superseded };
            sqlx::query(sql::SETTLE_ATTEMPT)
                .bind(attempt.id)
                .bind(from.as_str())
                .bind(to.as_str())
                .bind("ok")
                .bind(None::<&str>)
                .bind(raw_response)
                .bind(None::<&str>)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
            if won {
                CasOutcome::Won
            } else {
                let winner: Option<Option<Uuid>> =
                    sqlx::query_scalar("SELECT completed_by FROM jobs WHERE id = $1")
                        .bind(attempt.job_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                CasOutcome::Superseded { winner: winner.flatten() }
            }
        });
        Ok(outcome)
    }

    /// Recovery: the `starting` attempts of a job whose driver died become
    /// `unknown`. Returns how many did.
    pub async fn starting_to_unknown(&self, job_id: Uuid, detail: &str) -> Result<u64, StoreError> {
        let rows = on_pool!(self, pool => {
            sqlx::query(sql::STARTING_TO_UNKNOWN)
                .bind(job_id)
                .bind(detail)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        })?;
        Ok(rows)
    }

    /// `unknown` attempts of one provider that started at or before `started_before_ms`.
    pub async fn unknown_attempts_of(
        &self,
        provider: &str,
        started_before_ms: i64,
    ) -> Result<Vec<Attempt>, StoreError> {
        let rows: Vec<AttemptRow> = on_reader!(self, pool => {
            sqlx::query_as(sql::UNKNOWN_ATTEMPTS_OF_PROVIDER)
                .bind(provider)
                .bind(started_before_ms)
                .fetch_all(pool)
                .await
        })?;
        rows.into_iter().map(Attempt::try_from).collect()
    }

    /// Providers with at least one `unknown` attempt.
    pub async fn providers_with_unknown_attempts(&self) -> Result<Vec<String>, StoreError> {
        let names: Vec<String> = on_reader!(self, pool => {
            sqlx::query_scalar(sql::UNKNOWN_PROVIDERS).fetch_all(pool).await
        })?;
        Ok(names)
    }

    /// The number of the attempt with this id.
    pub async fn attempt_number(&self, id: Uuid) -> Result<Option<i32>, StoreError> {
        let number: Option<i32> = on_reader!(self, pool => {
            sqlx::query_scalar("SELECT number FROM attempts WHERE id = $1").bind(id).fetch_optional(pool).await
        })?;
        Ok(number)
    }

    /// `(provider, count)` of the attempts now `unknown`.
    pub async fn unknown_attempts_by_provider(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows: Vec<(String, i64)> = on_reader!(self, pool => {
            sqlx::query_as(sql::UNKNOWN_BY_PROVIDER).fetch_all(pool).await
        })?;
        Ok(rows)
    }

    pub async fn count_unknown_attempts(&self) -> Result<i64, StoreError> {
        let count: i64 = on_reader!(self, pool => {
            sqlx::query_scalar(sql::COUNT_UNKNOWN_ATTEMPTS).fetch_one(pool).await
        })?;
        Ok(count)
    }
}
