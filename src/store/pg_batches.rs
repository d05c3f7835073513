//! PostgreSQL: the writes every job makes, batched across jobs.
//!
//! Why: measured with the statements alone (pgbench, 16 clients, this
//! 2-core machine), most of PostgreSQL's CPU per job is spent per
//! *statement*, not per row: executor start-up, every CHECK constraint
//! parsed again from its stored text, the commit and its WAL flush, the
//! round trip. A new job is two statements — its insert, then its result's
//! compare-and-swap — and under load many jobs are at the same step at
//! once. Written four to a statement, a job cost PostgreSQL about half as
//! much; sixteen to a statement, about a quarter.
//!
//! How: one [`Lane`] per write. [`INSERT_JOBS_PG`] and [`COMPLETE_JOBS_PG`]
//! take arrays, one element per job. The insert is one SQL text for one job
//! or fifty (the transaction that books a budget, in `Store::create_job`,
//! runs it too, with one job); a delivery has its batch form and, for a
//! lone delivery, its one-row form, for the reason below. Both forms write
//! the result through the same clauses (`complete_job_cas!`). An attempt's
//! mark before its request leaves ([`MARK_SENT_PG`]) has a lane too: one
//! more commit per attempt, shared under load like the others.
//!
//! A delivery batch is planned for each batch (`persistent(false)`: an
//! unnamed statement, planned with its arguments), not once per connection:
//! its plan depends on the batch's size and on the tables' size now, and a
//! generic plan cached while the tables were small (hash joins over
//! sequential scans) scanned all of `attempts` and `jobs` for every batch
//! as they grew, until autovacuum's next ANALYZE. Measured on a fresh
//! schema at 64 clients: 0.58–0.61 ms of PostgreSQL CPU per job with the
//! cached plan, 0.45–0.49 planned per batch. Planning costs (and sqlx
//! parses an unnamed statement in a round trip of its own), which a batch
//! shares but a lone delivery would not: at 500 requests/s, where batches
//! are mostly of one, it doubled PostgreSQL's CPU per job. So a lone
//! delivery runs [`COMPLETE_JOB_PG`], prepared once: the same clauses for
//! one job, every lookup by primary key, a plan that cannot go stale. The
//! insert reads no table, so its plan cannot go stale either, and it stays
//! prepared whatever the batch's size.
//!
//! A batch is one statement, so it commits whole or not at all. If
//! PostgreSQL refuses one for something other than being unreachable — a
//! row breaking a constraint, a deadlock with another batch (two attempts
//! of the same two jobs, delivering at the same moment in opposite orders)
//! — its items are written again one statement each, so that only the row
//! at fault fails. If the database is unreachable, every item gets that
//! error, as it would have alone.
//!
//! [`INSERT_JOBS_PG`]: super::sql::INSERT_JOBS_PG
//! [`COMPLETE_JOBS_PG`]: super::sql::COMPLETE_JOBS_PG
//! [`COMPLETE_JOB_PG`]: super::sql::COMPLETE_JOB_PG
//! [`MARK_SENT_PG`]: super::sql::MARK_SENT_PG

use std::collections::HashMap;
use std::future::Future;

use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::{FromRow as _, PgExecutor, Row as _};
use uuid::Uuid;

use super::batch_lane::{BatchLimits, Lane};
use super::cas::CasOutcome;
use super::pg_statements::OneStatement;
use super::rows::JobRow;
use super::{DbError, StoreError, sql};
use crate::jobs::{Amounts, AttemptState, Attribution, Entrance};

/// What one statement writes at most. Past a few dozen jobs a batch saves
/// little more per job and holds its row locks longer. The byte limit
/// keeps a batch's message within one TLS record (16 KiB): sqlx 0.9.0
/// leaves Nagle's algorithm on (its issue 4335), so a message sent as two
/// records waits for the server's delayed ACK of the first — 40 ms on
/// loopback, where one record is less than a segment. Measured here with
/// TLS on: batches of 14+ deliveries took 45 ms, of 11 or fewer 4 ms.
const LIMITS: BatchLimits = BatchLimits { items: 64, bytes: 12 * 1024 };

/// Per job, what the arrays of a batch spend besides its strings: 4 bytes
/// of length per element, uuids and integers.
const FIXED_BYTES: usize = 160;

/// A new job, and its attempt 1 if it has a provider already.
#[derive(Debug, Clone)]
pub(super) struct JobInsert {
    pub id: Uuid,
    pub owner: String,
    pub idempotency_key: String,
    pub fingerprint: String,
    pub route: String,
    pub request: String,
    pub now_ms: i64,
    pub lease_owner: String,
    pub lease_expires_at_ms: i64,
    pub status: &'static str,
    /// Attempt 1: its id, provider and reservation.
    pub first_attempt: Option<(Uuid, String, Amounts)>,
    /// The job's bound on open attempts (its route's hedge, or 1).
    pub open_attempts: i32,
    pub attribution: Attribution,
    pub entered_through: Entrance,
    /// Attempt 1's `sent` (see `Store::unsent`).
    pub sent: Option<bool>,
}

impl JobInsert {
    fn size(&self) -> usize {
        let strings = [&self.owner, &self.idempotency_key, &self.fingerprint, &self.route, &self.request];
        let provider = self.first_attempt.as_ref().map_or(0, |(_, provider, _)| provider.len());
        let attribution = self.attribution.team.as_ref().map_or(0, String::len)
            + self.attribution.tags.iter().map(|tag| tag.len() + 3).sum::<usize>();
        FIXED_BYTES
            + strings.iter().map(|s| s.len()).sum::<usize>()
            + self.lease_owner.len()
            + provider
            + attribution
    }
}

/// An attempt's answer, to become its job's result if it wins the CAS.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    pub job_id: Uuid,
    pub job_version: i64,
    pub result: String,
    pub attempt_id: Uuid,
    pub now_ms: i64,
    pub raw_response: String,
    /// The result holds `raw_response` whole: a winner does not keep it twice.
    pub raw_in_result: bool,
    pub charge: Amounts,
    pub usage: Option<String>,
}

impl Delivery {
    fn size(&self) -> usize {
        FIXED_BYTES + self.result.len() + self.raw_response.len() + self.usage.as_ref().map_or(0, String::len)
    }
}

/// The lanes of one PostgreSQL store.
#[derive(Debug)]
pub(super) struct PgBatches {
    /// A job's row if this write inserted it; `None` if its key existed.
    pub inserts: Lane<JobInsert, Option<JobRow>>,
    pub deliveries: Lane<Delivery, CasOutcome>,
    /// Attempts marked sent before their requests leave: whether each was
    /// still `starting` and not yet sent.
    pub marks: Lane<SendMark, bool>,
}

/// An attempt about to be sent, and when.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendMark {
    pub attempt_id: Uuid,
    pub now_ms: i64,
}

impl SendMark {
    fn size(&self) -> usize {
        32
    }
}

impl PgBatches {
    /// `in_flight` batches of each kind may run at once, each on its own
    /// pool connection; `transaction_pooling` as in `postgres.rs`.
    pub(super) fn spawn(pool: &PgPool, in_flight: usize, transaction_pooling: bool) -> PgBatches {
        let for_inserts = Pg { pool: pool.clone(), transaction_pooling };
        let for_deliveries = for_inserts.clone();
        let for_marks = for_inserts.clone();
        PgBatches {
            inserts: Lane::spawn("insert", in_flight, LIMITS, JobInsert::size, move |jobs| {
                let pg = for_inserts.clone();
                async move { insert_each(&pg, jobs).await }
            }),
            deliveries: Lane::spawn("delivery", in_flight, LIMITS, Delivery::size, move |deliveries| {
                let pg = for_deliveries.clone();
                async move { deliver_each(&pg, deliveries).await }
            }),
            marks: Lane::spawn("send-mark", in_flight, LIMITS, SendMark::size, move |marks| {
                let pg = for_marks.clone();
                async move { mark_each(&pg, marks).await }
            }),
        }
    }
}

/// The pool, and whether a transaction pooler stands before it.
#[derive(Debug, Clone)]
struct Pg {
    pool: PgPool,
    transaction_pooling: bool,
}

impl Pg {
    /// Runs `statement` on one connection as `postgres.rs` says; commits.
    async fn one<R>(
        &self,
        statement: impl AsyncFnOnce(&mut PgConnection, bool) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut one = OneStatement::begin(&self.pool, self.transaction_pooling).await?;
        let out = statement(one.conn(), !self.transaction_pooling).await?;
        one.finish().await?;
        Ok(out)
    }
}

/// Runs [`sql::INSERT_JOBS_PG`]; the rows of the jobs it inserted. `named`:
/// sqlx's `persistent` (see `PostgresStore::named`).
pub(super) async fn insert_jobs<'e>(
    executor: impl PgExecutor<'e>,
    jobs: &[JobInsert],
    named: bool,
) -> Result<Vec<JobRow>, StoreError> {
    let rows = sqlx::query_as::<_, JobRow>(sql::INSERT_JOBS_PG)
        .bind(column(jobs, |job| job.id))
        .bind(column(jobs, |job| job.owner.as_str()))
        .bind(column(jobs, |job| job.idempotency_key.as_str()))
        .bind(column(jobs, |job| job.fingerprint.as_str()))
        .bind(column(jobs, |job| job.route.as_str()))
        .bind(column(jobs, |job| job.request.as_str()))
        .bind(column(jobs, |job| job.now_ms))
        .bind(column(jobs, |job| job.lease_owner.as_str()))
        .bind(column(jobs, |job| job.lease_expires_at_ms))
        .bind(column(jobs, |job| job.status))
        .bind(column(jobs, |job| job.first_attempt.as_ref().map(|(id, _, _)| *id)))
        .bind(column(jobs, |job| job.first_attempt.as_ref().map(|(_, provider, _)| provider.as_str())))
        .bind(column(jobs, |job| job.first_attempt.as_ref().map_or(0, |(_, _, reserved)| reserved.nanos)))
        .bind(column(jobs, |job| job.first_attempt.as_ref().map_or(0, |(_, _, reserved)| reserved.tokens)))
        .bind(column(jobs, |job| job.open_attempts))
        .bind(column(jobs, |job| job.attribution.key_id))
        .bind(column(jobs, |job| job.attribution.team.as_deref()))
        .bind(column(jobs, |job| job.attribution.tags.to_stored()))
        .bind(column(jobs, |job| job.entered_through.as_str()))
        .bind(column(jobs, |job| job.sent))
        .persistent(named)
        .fetch_all(executor)
        .await?;
    Ok(rows)
}

/// One field of every item: a parameter array of a batch statement.
fn column<'a, T, C>(items: &'a [T], field: impl Fn(&'a T) -> C) -> Vec<C> {
    items.iter().map(field).collect()
}

async fn insert_each(pg: &Pg, jobs: Vec<JobInsert>) -> Vec<Result<Option<JobRow>, StoreError>> {
    match pg.one(async |conn, named| insert_jobs(conn, &jobs, named).await).await {
        Ok(rows) => {
            let mut inserted: HashMap<Uuid, JobRow> = rows.into_iter().map(|row| (row.id(), row)).collect();
            jobs.iter().map(|job| Ok(inserted.remove(&job.id))).collect()
        }
        Err(err) => {
            one_at_a_time(err, &jobs, |job| async move {
                Ok(pg
                    .one(async |conn, named| insert_jobs(conn, std::slice::from_ref(job), named).await)
                    .await?
                    .pop())
            })
            .await
        }
    }
}

/// Runs [`sql::COMPLETE_JOBS_PG`], or [`sql::COMPLETE_JOB_PG`] for a lone
/// delivery; the rows of the attempts that settled.
async fn complete_jobs(
    conn: &mut PgConnection,
    deliveries: &[Delivery],
    named: bool,
) -> Result<Vec<PgRow>, StoreError> {
    if let [lone] = deliveries {
        let rows = sqlx::query(sql::COMPLETE_JOB_PG)
            .bind(lone.job_id)
            .bind(lone.job_version)
            .bind(lone.result.as_str())
            .bind(lone.attempt_id)
            .bind(lone.now_ms)
            .bind(lone.raw_response.as_str())
            .bind(lone.charge.nanos)
            .bind(lone.charge.tokens)
            .bind(lone.usage.as_deref())
            .bind(lone.raw_in_result)
            .persistent(named)
            .fetch_all(conn)
            .await?;
        return Ok(rows);
    }
    let rows = sqlx::query(sql::COMPLETE_JOBS_PG)
        .bind(column(deliveries, |d| d.job_id))
        .bind(column(deliveries, |d| d.job_version))
        .bind(column(deliveries, |d| d.result.as_str()))
        .bind(column(deliveries, |d| d.attempt_id))
        .bind(column(deliveries, |d| d.now_ms))
        .bind(column(deliveries, |d| d.raw_response.as_str()))
        .bind(column(deliveries, |d| d.charge.nanos))
        .bind(column(deliveries, |d| d.charge.tokens))
        .bind(column(deliveries, |d| d.usage.as_deref()))
        .bind(column(deliveries, |d| d.raw_in_result))
        .persistent(false)
        .fetch_all(conn)
        .await?;
    Ok(rows)
}

async fn deliver_each(pg: &Pg, deliveries: Vec<Delivery>) -> Vec<Result<CasOutcome, StoreError>> {
    match pg.one(async |conn, named| complete_jobs(conn, &deliveries, named).await).await {
        Ok(rows) => outcomes(&deliveries, rows),
        Err(err) => {
            one_at_a_time(err, &deliveries, |delivery| async move {
                let one = std::slice::from_ref(delivery);
                let rows = pg.one(async |conn, named| complete_jobs(conn, one, named).await).await?;
                outcomes(std::slice::from_ref(delivery), rows).pop().unwrap_or(Ok(CasOutcome::NotDeliverable))
            })
            .await
        }
    }
}

/// Runs [`sql::MARK_SENT_PG`] for a batch of marks; the ids it marked.
async fn mark_sent(
    conn: &mut PgConnection,
    marks: &[SendMark],
    named: bool,
) -> Result<std::collections::HashSet<Uuid>, StoreError> {
    let rows: Vec<(Uuid,)> = sqlx::query_as(sql::MARK_SENT_PG)
        .bind(column(marks, |mark| mark.attempt_id))
        .bind(marks.iter().map(|mark| mark.now_ms).max().unwrap_or_default())
        .persistent(named)
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Each mark: true when its attempt was still `starting` and not yet sent.
async fn mark_each(pg: &Pg, marks: Vec<SendMark>) -> Vec<Result<bool, StoreError>> {
    match pg.one(async |conn, named| mark_sent(conn, &marks, named).await).await {
        Ok(marked) => marks.iter().map(|mark| Ok(marked.contains(&mark.attempt_id))).collect(),
        Err(err) => {
            one_at_a_time(err, &marks, |mark| async move {
                let one = std::slice::from_ref(mark);
                let marked = pg.one(async |conn, named| mark_sent(conn, one, named).await).await?;
                Ok(marked.contains(&mark.attempt_id))
            })
            .await
        }
    }
}

/// Each delivery's outcome: its attempt's row if it settled (the first
/// delivery of an attempt gets it; a second one in the same batch could
/// not deliver), else [`CasOutcome::NotDeliverable`].
fn outcomes(deliveries: &[Delivery], rows: Vec<PgRow>) -> Vec<Result<CasOutcome, StoreError>> {
    let mut settled = HashMap::with_capacity(rows.len());
    for row in rows {
        match row.try_get::<Uuid, _>("settled_attempt") {
            Ok(attempt) => {
                settled.insert(attempt, row);
            }
            Err(err) => {
                let corrupt = || StoreError::Corrupt(format!("a settled attempt without its id: {err}"));
                return deliveries.iter().map(|_| Err(corrupt())).collect();
            }
        }
    }
    deliveries
        .iter()
        .map(|delivery| {
            settled.remove(&delivery.attempt_id).map_or(Ok(CasOutcome::NotDeliverable), |row| outcome(&row))
        })
        .collect()
}

fn outcome(row: &PgRow) -> Result<CasOutcome, StoreError> {
    let settled_as: String = row.try_get("settled_as")?;
    if settled_as == AttemptState::Succeeded.as_str() {
        let job = JobRow::from_row(row)?;
        Ok(CasOutcome::Won(Box::new(job.try_into()?)))
    } else {
        Ok(CasOutcome::Superseded { winner: row.try_get("winner")? })
    }
}

/// A batch PostgreSQL refused: each item again, alone, when the refusal may
/// be one row's fault; else the same error for every item.
async fn one_at_a_time<'a, I, O, F, Fut>(
    err: StoreError,
    items: &'a [I],
    alone: F,
) -> Vec<Result<O, StoreError>>
where
    F: Fn(&'a I) -> Fut,
    Fut: Future<Output = Result<O, StoreError>>,
{
    if items.len() > 1 && matches!(err, StoreError::Database(_)) {
        tracing::debug!(error = %err, jobs = items.len(), "a batch was refused; writing its jobs one at a time");
        let mut results = Vec::with_capacity(items.len());
        for item in items {
            results.push(alone(item).await);
        }
        return results;
    }
    let copies: Vec<_> = (1..items.len()).map(|_| Err(same_error(&err))).collect();
    std::iter::once(Err(err)).chain(copies).collect()
}

/// The same failure, for another item of the batch it failed.
fn same_error(err: &StoreError) -> StoreError {
    match err {
        StoreError::Unavailable(db) => StoreError::Unavailable(DbError::Batch(db.to_string())),
        StoreError::Corrupt(message) => StoreError::Corrupt(message.clone()),
        StoreError::Database(db) => StoreError::Database(DbError::Batch(db.to_string())),
        StoreError::Migrate(inner) => StoreError::Database(DbError::Batch(inner.to_string())),
    }
}

/// The batch statements against a real PostgreSQL: what a batch does that
/// one job alone cannot show. (`tests/batches.rs` drives the lanes through
/// the gateway.)
#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh schema with the migrations applied; `None` (said loudly)
    /// when PostgreSQL is unreachable and not required.
    async fn fresh_pool() -> Option<PgPool> {
        let base = std::env::var("INTENTGATE_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let admin = match PgPool::connect(&base).await {
            Ok(pool) => pool,
            Err(err) if std::env::var("INTENTGATE_REQUIRE_PG").is_ok_and(|v| v == "1") => {
                panic!("PostgreSQL is required (INTENTGATE_REQUIRE_PG=1) but {base} is unreachable: {err}")
            }
            Err(err) => {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!! SKIPPED: PostgreSQL test — {base} is unreachable: {err}\n"
                );
                return None;
            }
        };
        let schema = format!("t_{}", Uuid::now_v7().simple());
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.unwrap();
        let separator = if base.contains('?') { '&' } else { '?' };
        let pool =
            PgPool::connect(&format!("{base}{separator}options=-c%20search_path%3D{schema}")).await.unwrap();
        super::super::postgres::MIGRATOR.run(&pool).await.unwrap();
        Some(pool)
    }

    /// The pool with no pooler before it.
    fn plain(pool: &PgPool) -> Pg {
        Pg { pool: pool.clone(), transaction_pooling: false }
    }

    fn job(key: &str, with_attempt: bool) -> JobInsert {
        JobInsert {
            id: Uuid::now_v7(),
            owner: "alice".to_owned(),
            idempotency_key: key.to_owned(),
            fingerprint: "f".repeat(64),
            route: "chat".to_owned(),
            request: "{}".to_owned(),
            now_ms: 1,
            lease_owner: "gw-test".to_owned(),
            lease_expires_at_ms: 60_000,
            status: if with_attempt { "running" } else { "pending" },
            first_attempt: with_attempt.then(|| (Uuid::now_v7(), "sim".to_owned(), Amounts::default())),
            open_attempts: 1,
            attribution: Attribution::default(),
            entered_through: Entrance::Jobs,
            sent: Some(false),
        }
    }

    fn delivery(job: &JobInsert, attempt_id: Uuid, answer: &str) -> Delivery {
        Delivery {
            job_id: job.id,
            job_version: 0,
            result: answer.to_owned(),
            attempt_id,
            now_ms: 2,
            raw_response: answer.to_owned(),
            raw_in_result: false,
            charge: Amounts::default(),
            usage: None,
        }
    }

    fn first_attempt(job: &JobInsert) -> Uuid {
        job.first_attempt.as_ref().map(|(id, _, _)| *id).unwrap()
    }

    #[tokio::test]
    async fn a_key_twice_in_one_batch_is_inserted_once() {
        let Some(pool) = fresh_pool().await else { return };
        let (first, again) = (job("k", true), job("k", true));
        let results = insert_each(&plain(&pool), vec![first.clone(), again.clone()]).await;
        let inserted: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        assert_eq!(inserted[0].as_ref().map(JobRow::id), Some(first.id));
        assert!(inserted[1].is_none(), "the second of a key finds it taken");
        let (jobs, attempts): (i64, i64) =
            sqlx::query_as("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM attempts)")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!((jobs, attempts), (1, 1), "one job, and only its attempt 1");
    }

    #[tokio::test]
    async fn a_row_the_schema_refuses_fails_alone() {
        let Some(pool) = fresh_pool().await else { return };
        let mut bad = job("bad", true);
        bad.fingerprint = "short".to_owned();
        let (good, other) = (job("good", true), job("other", false));
        let results = insert_each(&plain(&pool), vec![good.clone(), bad, other.clone()]).await;
        assert_eq!(results[0].as_ref().unwrap().as_ref().map(JobRow::id), Some(good.id));
        assert!(matches!(results[1], Err(StoreError::Database(_))), "{:?}", results[1]);
        assert_eq!(results[2].as_ref().unwrap().as_ref().map(JobRow::id), Some(other.id));
        let keys: Vec<String> =
            sqlx::query_scalar("SELECT idempotency_key FROM jobs ORDER BY 1").fetch_all(&pool).await.unwrap();
        assert_eq!(keys, ["good", "other"]);
    }

    #[tokio::test]
    async fn two_attempts_of_one_job_in_one_batch_one_wins_and_the_other_names_it() {
        let Some(pool) = fresh_pool().await else { return };
        let job = job("race", true);
        insert_jobs(&pool, std::slice::from_ref(&job), true).await.unwrap();
        // Attempt 1 was declared unknown and abandoned; attempt 2 is live.
        // Both answer at the same moment.
        let first = first_attempt(&job);
        sqlx::query("UPDATE attempts SET state = 'unknown' WHERE id = $1")
            .bind(first)
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(
            "UPDATE attempts SET state = 'abandoned', finished_at = 2, cost_nanos = 0, tokens = 0 WHERE id = $1",
        )
        .bind(first)
        .execute(&pool)
        .await
        .unwrap();
        let second = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at) \
             VALUES ($1, $2, 2, 'sim', 'starting', 0, 2)",
        )
        .bind(second)
        .bind(job.id)
        .execute(&pool)
        .await
        .unwrap();

        let outcomes = deliver_each(
            &plain(&pool),
            vec![delivery(&job, first, "\"one\""), delivery(&job, second, "\"two\"")],
        )
        .await;
        let outcomes: Vec<CasOutcome> = outcomes.into_iter().map(Result::unwrap).collect();
        let winner = match (&outcomes[0], &outcomes[1]) {
            (CasOutcome::Won(won), CasOutcome::Superseded { winner }) => {
                assert_eq!(*winner, Some(first));
                assert_eq!(won.completed_by, Some(first));
                first
            }
            (CasOutcome::Superseded { winner }, CasOutcome::Won(won)) => {
                assert_eq!(*winner, Some(second));
                assert_eq!(won.completed_by, Some(second));
                second
            }
            other => panic!("exactly one of the two wins: {other:?}"),
        };
        let states: Vec<(Uuid, String)> =
            sqlx::query_as("SELECT id, state FROM attempts ORDER BY number").fetch_all(&pool).await.unwrap();
        for (id, state) in states {
            assert_eq!(state, if id == winner { "succeeded" } else { "superseded" });
        }
        let (completed_by, version): (Option<Uuid>, i64) =
            sqlx::query_as("SELECT completed_by, version FROM jobs").fetch_one(&pool).await.unwrap();
        assert_eq!((completed_by, version), (Some(winner), 1));
    }

    #[tokio::test]
    async fn a_lone_delivery_runs_the_one_row_statement_with_the_same_outcomes() {
        let Some(pool) = fresh_pool().await else { return };
        let job = job("lone", true);
        insert_jobs(&pool, std::slice::from_ref(&job), true).await.unwrap();
        let once = deliver_each(&plain(&pool), vec![delivery(&job, first_attempt(&job), "\"answer\"")]).await;
        match &once[..] {
            [Ok(CasOutcome::Won(won))] => {
                assert_eq!(won.result.as_deref(), Some("\"answer\""));
                assert_eq!((won.version, won.completed_by), (1, Some(first_attempt(&job))));
            }
            other => panic!("a lone delivery wins: {other:?}"),
        }
        let again = deliver_each(&plain(&pool), vec![delivery(&job, first_attempt(&job), "\"again\"")]).await;
        assert!(matches!(again[..], [Ok(CasOutcome::NotDeliverable)]), "{again:?}");
    }

    #[tokio::test]
    async fn an_attempt_that_cannot_deliver_does_not_hold_back_its_batch() {
        let Some(pool) = fresh_pool().await else { return };
        let (settled, live) = (job("settled", true), job("live", true));
        insert_jobs(&pool, &[settled.clone(), live.clone()], true).await.unwrap();
        sqlx::query(
            "UPDATE attempts SET state = 'failed', finished_at = 2, cost_nanos = 0, tokens = 0 WHERE id = $1",
        )
        .bind(first_attempt(&settled))
        .execute(&pool)
        .await
        .unwrap();
        let outcomes = deliver_each(
            &plain(&pool),
            vec![
                delivery(&settled, first_attempt(&settled), "\"late\""),
                delivery(&live, first_attempt(&live), "\"answer\""),
            ],
        )
        .await;
        assert!(matches!(outcomes[0], Ok(CasOutcome::NotDeliverable)), "{:?}", outcomes[0]);
        match &outcomes[1] {
            Ok(CasOutcome::Won(job)) => assert_eq!(job.result.as_deref(), Some("\"answer\"")),
            other => panic!("the live attempt wins: {other:?}"),
        }
    }
}
