//! Attempt rows: the guarded start (R4), settling, the result
//! compare-and-swap (R6, R7) and recovery.

use uuid::Uuid;

use super::cas::CasOutcome;
use super::meters::{Reservation, book_pg, book_sqlite, check_sqlite};
use super::pg_batches::{Delivery, SendMark};
use super::rows::{AttemptRow, JobRow, first};
use super::sqlite_statements::{execute, fetch_all, fetch_optional};
use super::{Store, StoreError, sql};
use crate::budgets::LimitRefusal;
use crate::jobs::{
    Amounts, Attempt, AttemptOutcome, AttemptState, Job, JobStatus, StartBlocked, may_start_attempt,
};

/// What `start_attempt` did.
#[derive(Debug, Clone)]
pub enum StartOutcome {
    /// The attempt row is committed as `starting`; its request may now leave.
    Started(Attempt),
    /// R4 refused it: the domain said so, or the partial unique index did.
    Blocked(StartBlocked),
    /// A budget or rate limit refused its reservation; nothing was written.
    Refused(LimitRefusal),
}

/// How an attempt leaves an open state.
#[derive(Debug, Clone, Copy)]
pub struct Settle<'a> {
    pub from: AttemptState,
    pub to: AttemptState,
    pub outcome: Option<AttemptOutcome>,
    pub detail: Option<&'a str>,
    pub response: Option<&'a str>,
    pub resolved_by: Option<&'a str>,
    /// What the attempt is charged, when `to` is a closed state
    /// ([`crate::jobs::charge`]); the schema refuses to close it without.
    pub charge: Option<Amounts>,
}

impl Store {
    /// Every attempt of a job, in the order they started.
    pub async fn attempts(&self, job_id: Uuid) -> Result<Vec<Attempt>, StoreError> {
        let rows = self.read_all(sql::SELECT_ATTEMPTS, vec![job_id.into()], AttemptRow::from_sqlite).await?;
        rows.into_iter().map(Attempt::try_from).collect()
    }

    /// The provider's answer as an attempt received it, byte for byte (kept
    /// for audit, and for a superseded answer that is not the job's
    /// result). Not part of [`Attempt`]: no view shows it, and it can be
    /// large, so every read of a job's attempts would copy it for nothing.
    pub async fn attempt_response(&self, attempt_id: Uuid) -> Result<Option<String>, StoreError> {
        let row = self.read_optional(sql::SELECT_ATTEMPT_RESPONSE, vec![attempt_id.into()], first).await?;
        Ok(row.and_then(|(response,)| response))
    }

    pub async fn attempt(&self, job_id: Uuid, number: i32) -> Result<Option<Attempt>, StoreError> {
        let args = vec![job_id.into(), i64::from(number).into()];
        let row = self.read_optional(sql::SELECT_ATTEMPT, args, AttemptRow::from_sqlite).await?;
        row.map(Attempt::try_from).transpose()
    }

    /// R4: writes attempt `starting` (with the job version it read), in a
    /// free lane if fewer than `open_attempts` attempts are open (1 for
    /// any attempt but a hedged one, which needs none open), and moves
    /// the job to `running`, and books its `reservation` on the meters of
    /// its budgets and rate limits, in one transaction — or says why not
    /// (then nothing is written). The domain
    /// answers first; if two drivers race past it, the partial unique index
    /// `attempts_one_open_per_lane` (or `UNIQUE (job_id, number)`) refuses the
    /// second insert and this returns `Blocked` for it too.
    pub async fn start_attempt(
        &self,
        job_id: Uuid,
        provider: &str,
        reservation: &Reservation,
        (open_attempts, continues): (i32, Option<i32>),
        now_ms: i64,
    ) -> Result<StartOutcome, StoreError> {
        let start = NewAttempt { job_id, provider, reservation, open_attempts, continues, now_ms };
        match self {
            Store::Sqlite(store) => start_attempt_sqlite(store, start).await,
            Store::Postgres(store) => start_attempt_pg(store, start).await,
        }
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
        let args = vec![
            id.into(),
            settle.from.as_str().into(),
            settle.to.as_str().into(),
            settle.outcome.map(AttemptOutcome::as_str).into(),
            settle.detail.into(),
            settle.response.into(),
            settle.resolved_by.into(),
            finished_at.into(),
            settle.charge.map(|c| c.nanos).into(),
            settle.charge.map(|c| c.tokens).into(),
            now_ms.into(),
        ];
        Ok(self.execute(sql::SETTLE_ATTEMPT, args).await? == 1)
    }

    /// R6/R7: the attempt's result becomes the job's result only through the
    /// conditional UPDATE on `(id, version, completed_by IS NULL)`. The loser
    /// keeps its payload on its own row as `superseded`; nothing is merged.
    /// Either way the attempt is charged `charge` for `usage`: the provider
    /// did the work. `raw_in_result`: the result holds the raw answer,
    /// parsed (OpenAI's body as its completion, a passed-through answer, a
    /// stream's chunks), so a winner does not keep it a second time.
    pub async fn complete_job(
        &self,
        attempt: &Attempt,
        result: &str,
        (raw_response, raw_in_result): (&str, bool),
        (charge, usage): (Amounts, Option<&str>),
        now_ms: i64,
    ) -> Result<CasOutcome, StoreError> {
        let (attempt_id, job_id, job_version) = (attempt.id, attempt.job_id, attempt.job_version);
        let Amounts { nanos, tokens } = charge;
        match self {
            Store::Sqlite(store) => {
                let (result, raw_response) = (result.to_owned(), raw_response.to_owned());
                let usage = usage.map(str::to_owned);
                store
                    .writer
                    .write(move |conn| {
                        let won = match execute(
                            conn,
                            sql::COMPLETE_JOB_CAS,
                            &[&job_id, &job_version, &result, &attempt_id, &now_ms],
                        )? {
                            0 => None,
                            _ => Some(
                                fetch_optional(conn, sql::SELECT_JOB_BY_ID, &[&job_id], JobRow::from_sqlite)?
                                    .ok_or_else(|| {
                                        StoreError::Corrupt(format!("job {job_id} won and vanished"))
                                    })?,
                            ),
                        };
                        let to = settled_state(won.is_some());
                        let kept = (won.is_none() || !raw_in_result).then_some(&raw_response);
                        let settled = execute(
                            conn,
                            sql::SETTLE_DELIVERED,
                            &[&attempt_id, &to, &kept, &now_ms, &nanos, &tokens, &usage],
                        )?;
                        if settled == 0 {
                            return Ok(CasOutcome::NotDeliverable);
                        }
                        if let Some(job) = won {
                            return Ok(CasOutcome::Won(Box::new(job.try_into()?)));
                        }
                        let winner = fetch_optional(conn, sql::SELECT_WINNER, &[&job_id], |row| {
                            row.get::<_, Option<Uuid>>(0)
                        })?;
                        Ok(CasOutcome::Superseded { winner: winner.flatten() })
                    })
                    .await
            }
            Store::Postgres(store) => {
                let delivery = Delivery {
                    job_id,
                    job_version,
                    result: result.to_owned(),
                    attempt_id,
                    now_ms,
                    raw_response: raw_response.to_owned(),
                    raw_in_result,
                    charge,
                    usage: usage.map(str::to_owned),
                };
                store.batches.deliveries.write(delivery).await
            }
        }
    }

    /// Marks attempt `id` as handed to its provider, committed before the
    /// request leaves. False: the attempt is no longer `starting` (a sweep
    /// settled it) and must not be sent.
    pub async fn mark_sent(&self, id: Uuid, now_ms: i64) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(_) => Ok(self.execute(sql::MARK_SENT, vec![id.into(), now_ms.into()]).await? == 1),
            Store::Postgres(store) => store.batches.marks.write(SendMark { attempt_id: id, now_ms }).await,
        }
    }

    /// Claims job `attempt.job_id`'s stream for `attempt`, whose read
    /// version becomes the job's next (see [`sql::CLAIM_STREAM`]). False:
    /// the job moved on first (another claim, a result).
    pub async fn claim_stream(&self, attempt: &Attempt, now_ms: i64) -> Result<bool, StoreError> {
        let (job, version) = (attempt.job_id, attempt.job_version);
        self.execute_guarded(vec![
            (sql::CLAIM_STREAM, vec![job.into(), version.into(), now_ms.into()]),
            (sql::CLAIMED_STREAM_ATTEMPT, vec![attempt.id.into(), (version + 1).into()]),
        ])
        .await
    }

    /// Recovery: attempt `id`, written and never sent, fails as `not_sent`.
    /// False when its driver marked it sent first (it then becomes
    /// `unknown` with the job's other `starting` attempts).
    pub async fn unsent_to_failed(&self, id: Uuid, detail: &str, now_ms: i64) -> Result<bool, StoreError> {
        Ok(self.execute(sql::UNSENT_TO_FAILED, vec![id.into(), detail.into(), now_ms.into()]).await? == 1)
    }

    /// Recovery: the `starting` attempts of a job whose driver died become
    /// `unknown`. Returns how many did.
    pub async fn starting_to_unknown(
        &self,
        job_id: Uuid,
        detail: &str,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        self.execute(sql::STARTING_TO_UNKNOWN, vec![job_id.into(), detail.into(), now_ms.into()]).await
    }

    /// `unknown` attempts of one provider that started at or before `started_before_ms`.
    pub async fn unknown_attempts_of(
        &self,
        provider: &str,
        started_before_ms: i64,
    ) -> Result<Vec<Attempt>, StoreError> {
        let args = vec![provider.into(), started_before_ms.into()];
        let rows = self.read_all(sql::UNKNOWN_ATTEMPTS_OF_PROVIDER, args, AttemptRow::from_sqlite).await?;
        rows.into_iter().map(Attempt::try_from).collect()
    }

    /// Providers with at least one `unknown` attempt.
    pub async fn providers_with_unknown_attempts(&self) -> Result<Vec<String>, StoreError> {
        let names = self.read_all(sql::UNKNOWN_PROVIDERS, vec![], first::<String>).await?;
        Ok(names.into_iter().map(|(name,)| name).collect())
    }

    /// The number of the attempt with this id.
    pub async fn attempt_number(&self, id: Uuid) -> Result<Option<i32>, StoreError> {
        let number = self.read_optional(sql::ATTEMPT_NUMBER, vec![id.into()], first::<i32>).await?;
        Ok(number.map(|(number,)| number))
    }

    /// `(provider, count)` of the attempts now `unknown`.
    pub async fn unknown_attempts_by_provider(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.read_all(sql::UNKNOWN_BY_PROVIDER, vec![], |row| Ok((row.get(0)?, row.get(1)?))).await
    }

    pub async fn count_unknown_attempts(&self) -> Result<i64, StoreError> {
        let count = self.read_optional(sql::COUNT_UNKNOWN_ATTEMPTS, vec![], first::<i64>).await?;
        Ok(count.map_or(0, |(count,)| count))
    }
}

/// What [`Store::start_attempt`] is asked to write.
struct NewAttempt<'a> {
    job_id: Uuid,
    provider: &'a str,
    reservation: &'a Reservation,
    open_attempts: i32,
    /// The attempt whose cut stream it continues.
    continues: Option<i32>,
    now_ms: i64,
}

/// What the domain allows, read inside `start_attempt`'s transaction.
struct StartPlan {
    job: Job,
    number: i32,
    lane: i32,
}

/// R4 decided once for both backends: may this job start another attempt,
/// and under which number?
fn plan_start(
    job_id: Uuid,
    job: Option<JobRow>,
    attempts: Vec<AttemptRow>,
    open_attempts: i32,
) -> Result<Result<StartPlan, StartBlocked>, StoreError> {
    let Some(job) = job else {
        return Err(StoreError::Corrupt(format!("attempt for missing job {job_id}")));
    };
    let job = Job::try_from(job)?;
    let attempts: Vec<Attempt> = attempts.into_iter().map(Attempt::try_from).collect::<Result<_, _>>()?;
    let lane = match may_start_attempt(job.status, &attempts, open_attempts) {
        Ok(lane) => lane,
        Err(blocked) => return Ok(Err(blocked)),
    };
    let number = attempts.last().map_or(1, |a| a.number + 1);
    Ok(Ok(StartPlan { job, number, lane }))
}

impl StartPlan {
    /// A racing driver inserted first; its attempt is open.
    fn raced(&self) -> StartOutcome {
        StartOutcome::Blocked(StartBlocked::InFlight { attempt_id: Uuid::nil(), number: self.number })
    }

    /// The job's move to `running`, unless it is there already.
    fn job_transition(&self) -> Option<(&'static str, &'static str)> {
        (self.job.status != JobStatus::Running)
            .then(|| (self.job.status.as_str(), JobStatus::Running.as_str()))
    }
}

/// The state a delivered attempt settles in: its answer won, or came second.
fn settled_state(won: bool) -> &'static str {
    if won { AttemptState::Succeeded.as_str() } else { AttemptState::Superseded.as_str() }
}

/// SQLite's [`Store::start_attempt`]: the plan, the check, the insert and
/// the booking in one writer op.
async fn start_attempt_sqlite(
    store: &super::sqlite::SqliteStore,
    start: NewAttempt<'_>,
) -> Result<StartOutcome, StoreError> {
    let attempt_id = Uuid::now_v7();
    let NewAttempt { job_id, now_ms, open_attempts, continues, .. } = start;
    let sent = store.record_sends.then_some(false);
    let Amounts { nanos, tokens } = start.reservation.amounts;
    let provider = start.provider.to_owned();
    let holds = start.reservation.holds.clone();
    store
        .writer
        .write(move |conn| {
            let job = fetch_optional(conn, sql::SELECT_JOB_BY_ID, &[&job_id], JobRow::from_sqlite)?;
            let attempts = fetch_all(conn, sql::SELECT_ATTEMPTS, &[&job_id], AttemptRow::from_sqlite)?;
            let plan = match plan_start(job_id, job, attempts, open_attempts)? {
                Ok(plan) => plan,
                Err(blocked) => return Ok(StartOutcome::Blocked(blocked)),
            };
            if let Some(refusal) = check_sqlite(conn, &holds)? {
                return Ok(StartOutcome::Refused(refusal));
            }
            let inserted = fetch_optional(
                conn,
                sql::INSERT_ATTEMPT,
                &[
                    &attempt_id,
                    &job_id,
                    &plan.number,
                    &provider,
                    &plan.job.version,
                    &now_ms,
                    &nanos,
                    &tokens,
                    &plan.lane,
                    &continues,
                    &sent,
                ],
                AttemptRow::from_sqlite,
            );
            let row = match inserted {
                Ok(Some(row)) => row,
                Ok(None) => {
                    return Err(StoreError::Corrupt("INSERT … RETURNING returned nothing".into()));
                }
                Err(err) if err.is_unique_violation() => return Ok(plan.raced()),
                Err(err) => return Err(err),
            };
            book_sqlite(conn, attempt_id, &holds)?;
            if let Some((from, to)) = plan.job_transition() {
                execute(conn, sql::SET_JOB_STATUS, &[&job_id, &from, &to, &None::<String>, &now_ms])?;
            }
            Ok(StartOutcome::Started(Attempt::try_from(row)?))
        })
        .await
}

/// PostgreSQL's [`Store::start_attempt`]: one transaction; a refused
/// booking rolls the attempt back with it.
async fn start_attempt_pg(
    store: &super::postgres::PostgresStore,
    start: NewAttempt<'_>,
) -> Result<StartOutcome, StoreError> {
    let attempt_id = Uuid::now_v7();
    let NewAttempt { job_id, provider, reservation, open_attempts, continues, now_ms } = start;
    let Amounts { nanos, tokens } = reservation.amounts;

    let named = store.named(); // false through a transaction pooler (postgres.rs)
    let mut tx = super::pg_statements::begin(&store.pool).await?;
    let job: Option<JobRow> =
        sqlx::query_as(sql::SELECT_JOB_BY_ID).bind(job_id).persistent(named).fetch_optional(&mut *tx).await?;
    let attempts: Vec<AttemptRow> =
        sqlx::query_as(sql::SELECT_ATTEMPTS).bind(job_id).persistent(named).fetch_all(&mut *tx).await?;
    let plan = match plan_start(job_id, job, attempts, open_attempts)? {
        Ok(plan) => plan,
        Err(blocked) => return Ok(StartOutcome::Blocked(blocked)),
    };
    let inserted = sqlx::query_as::<_, AttemptRow>(sql::INSERT_ATTEMPT)
        .bind(attempt_id)
        .bind(job_id)
        .bind(plan.number)
        .bind(provider)
        .bind(plan.job.version)
        .bind(now_ms)
        .bind(nanos)
        .bind(tokens)
        .bind(plan.lane)
        .bind(continues)
        .bind(store.record_sends.then_some(false))
        .persistent(named)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::from);
    let row = match inserted {
        Ok(row) => row,
        Err(err) if err.is_unique_violation() => return Ok(plan.raced()),
        Err(err) => return Err(err),
    };
    if let Some(refusal) = book_pg(&mut tx, attempt_id, &reservation.holds, named).await? {
        // Dropping the transaction rolls the attempt back with it.
        return Ok(StartOutcome::Refused(refusal));
    }
    if let Some((from, to)) = plan.job_transition() {
        sqlx::query(sql::SET_JOB_STATUS)
            .bind(job_id)
            .bind(from)
            .bind(to)
            .bind(None::<&str>)
            .bind(now_ms)
            .persistent(named)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(StartOutcome::Started(Attempt::try_from(row)?))
}
