//! Job rows: insert-or-get, reads, status transitions, the result CAS and
//! the driving lease.

use std::sync::Arc;

use uuid::Uuid;

use super::meters::{Reservation, book_pg, book_sqlite, check_sqlite};
use super::pg_batches::{JobInsert, insert_jobs};
use super::rows::{JobRow, first};
use super::sqlite_statements::{execute, fetch_optional};
use super::{Created, Store, StoreError, sql};
use crate::budgets::Hold;
use crate::jobs::{Amounts, Attempt, Entrance, Job, JobStatus, NewJob};

/// A lease held by one gateway instance on one job (R10).
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub owner: &'a str,
    pub expires_at_ms: i64,
}

/// Filters of `intentgate jobs list`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub status: Option<JobStatus>,
    pub owner: Option<String>,
    pub route: Option<String>,
    pub limit: i64,
}

impl Store {
    /// Inserts the job unless `(owner, idempotency_key)` exists, in which
    /// case the existing job is returned (R2). `INSERT … ON CONFLICT DO
    /// NOTHING` then a read: the unique constraint decides, and a racing
    /// duplicate waits on it rather than on our code.
    ///
    /// With a `first_provider`, a new job is inserted `running` together
    /// with its attempt 1 `starting` on that provider, in the same
    /// transaction (R4 holds trivially: a new job has no other attempt), so
    /// its driver can call the provider at once.
    ///
    /// A new job's attempt 1 books its `Reservation` in the same
    /// transaction; if one hold does not fit, nothing is written and the
    /// answer is [`Created::Refused`]. A duplicate books nothing, and a job
    /// inserted without an attempt books nothing until one starts.
    pub async fn create_job(
        &self,
        new: &NewJob,
        lease: Lease<'_>,
        first: Option<(&str, &Reservation)>,
        open_attempts: i32,
        now_ms: i64,
    ) -> Result<Created, StoreError> {
        let insert = FirstInsert {
            open_attempts,
            attempt_id: Uuid::now_v7(),
            provider: first.map(|(provider, _)| provider),
            reserved: first.map(|(_, reservation)| reservation.amounts).unwrap_or_default(),
            holds: first.map(|(_, reservation)| reservation.holds.as_slice()).unwrap_or_default(),
        };
        let created = match self {
            Store::Sqlite(store) => create_job_sqlite(store, new, lease, &insert, now_ms).await?,
            Store::Postgres(store) => self.create_job_pg(store, new, lease, &insert, now_ms).await?,
        };
        let (attempt_id, first_provider, reserved) = (insert.attempt_id, insert.provider, insert.reserved);
        Ok(match (created, first_provider) {
            (Created::New(job, None), Some(provider)) => {
                let mut attempt = Attempt::first(attempt_id, &job, provider, reserved, now_ms);
                if self.unsent().is_none() {
                    attempt.sent = crate::jobs::Sent::Unrecorded;
                }
                Created::New(job, Some(Box::new(attempt)))
            }
            (created, _) => created,
        })
    }

    /// The job with this id, whoever owns it. Callers scope by owner.
    pub async fn job(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let row = self.read_optional(sql::SELECT_JOB_BY_ID, vec![id.into()], JobRow::from_sqlite).await?;
        row.map(Job::try_from).transpose()
    }

    /// The job with this id if `owner` owns it; `None` as owner means any
    /// owner (an admin). Another owner's job is `None`, found by the same
    /// index lookup as a missing one ([`sql::SELECT_JOB_FOR_OWNER`]).
    pub async fn job_for_owner(&self, id: Uuid, owner: Option<&str>) -> Result<Option<Job>, StoreError> {
        let args = vec![id.into(), owner.into()];
        let row = self.read_optional(sql::SELECT_JOB_FOR_OWNER, args, JobRow::from_sqlite).await?;
        row.map(Job::try_from).transpose()
    }

    pub async fn job_by_key(&self, owner: &str, key: &str) -> Result<Option<Job>, StoreError> {
        let args = vec![owner.into(), key.into()];
        let row = self.read_optional(sql::SELECT_JOB_BY_KEY, args, JobRow::from_sqlite).await?;
        row.map(Job::try_from).transpose()
    }

    /// Number of job rows (of one owner, or all): used by tests and tools to
    /// prove that nothing was stored.
    pub async fn count_jobs(&self, owner: Option<&str>) -> Result<i64, StoreError> {
        let count = self.read_optional(sql::COUNT_JOBS, vec![owner.into()], first::<i64>).await?;
        Ok(count.map_or(0, |(count,)| count))
    }

    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        let args = vec![
            filter.status.map(JobStatus::as_str).into(),
            filter.owner.as_deref().into(),
            filter.route.as_deref().into(),
            filter.limit.into(),
        ];
        let rows = self.read_all(sql::LIST_JOBS, args, JobRow::from_sqlite).await?;
        rows.into_iter().map(Job::try_from).collect()
    }

    /// Moves the job from `from` to `to` (a transition of
    /// `JobStatus::can_become`); false when it was not in `from`.
    pub async fn set_job_status(
        &self,
        id: Uuid,
        from: JobStatus,
        to: JobStatus,
        error: Option<&str>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        debug_assert!(from.can_become(to), "{from} → {to}");
        let error = error.map(str::to_owned);
        let rows = self
            .execute(
                sql::SET_JOB_STATUS,
                vec![id.into(), from.as_str().into(), to.as_str().into(), error.into(), now_ms.into()],
            )
            .await?;
        Ok(rows == 1)
    }

    /// Fails the job from `from`, releasing the lease if `holder` holds it;
    /// false when the job was not in `from`.
    pub async fn fail_job(
        &self,
        id: Uuid,
        from: JobStatus,
        error: &str,
        holder: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        debug_assert!(from.can_become(JobStatus::Failed), "{from} → failed");
        let args = vec![id.into(), from.as_str().into(), error.into(), now_ms.into(), holder.into()];
        Ok(self.execute(sql::FAIL_JOB, args).await? == 1)
    }

    /// Asks that the job's settle be announced to other processes
    /// ([`sql::MARK_AWAITED`]), for a waiter of `instance`; true when it
    /// will be. Always false on SQLite (one process).
    pub async fn mark_awaited(&self, id: Uuid, instance: &str) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(_) => Ok(false),
            Store::Postgres(_) => {
                Ok(self.execute(sql::MARK_AWAITED, vec![id.into(), instance.into()]).await? == 1)
            }
        }
    }

    /// Takes (or re-takes) the lease unless another live instance holds it.
    pub async fn claim_lease(&self, id: Uuid, lease: Lease<'_>, now_ms: i64) -> Result<bool, StoreError> {
        let args = vec![id.into(), lease.owner.into(), lease.expires_at_ms.into(), now_ms.into()];
        Ok(self.execute(sql::CLAIM_LEASE, args).await? == 1)
    }

    /// Extends a lease we hold; false when we lost it.
    pub async fn renew_lease(&self, id: Uuid, lease: Lease<'_>) -> Result<bool, StoreError> {
        let args = vec![id.into(), lease.owner.into(), lease.expires_at_ms.into()];
        Ok(self.execute(sql::RENEW_LEASE, args).await? == 1)
    }

    pub async fn release_lease(&self, id: Uuid, owner: &str) -> Result<(), StoreError> {
        self.execute(sql::RELEASE_LEASE, vec![id.into(), owner.into()]).await?;
        Ok(())
    }

    /// Jobs `unknown` with no open attempt left (see `sql::STRANDED_UNKNOWN`).
    pub async fn stranded_unknown_jobs(&self, limit: i64) -> Result<Vec<Uuid>, StoreError> {
        let ids = self.read_all(sql::STRANDED_UNKNOWN, vec![limit.into()], first::<Uuid>).await?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }

    /// Jobs still to be driven whose driver stopped renewing its lease.
    pub async fn expired_leases(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<(Uuid, JobStatus)>, StoreError> {
        let rows: Vec<(Uuid, String)> = self
            .read_all(sql::EXPIRED_LEASES, vec![now_ms.into(), limit.into()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .await?;
        rows.into_iter()
            .map(|(id, status)| Ok((id, status.parse().map_err(|e| StoreError::Corrupt(format!("{e}")))?)))
            .collect()
    }
}

/// A new job's attempt 1, when the gate let one start with it.
struct FirstInsert<'a> {
    /// The job's bound on open attempts (its route's hedge, or 1).
    open_attempts: i32,
    attempt_id: Uuid,
    provider: Option<&'a str>,
    reserved: Amounts,
    holds: &'a [Hold],
}

impl FirstInsert<'_> {
    fn status(&self) -> JobStatus {
        if self.provider.is_some() { JobStatus::Running } else { JobStatus::Pending }
    }
}

/// SQLite's [`Store::create_job`]: one writer op, the conflict's read in it.
async fn create_job_sqlite(
    store: &super::sqlite::SqliteStore,
    new: &NewJob,
    lease: Lease<'_>,
    first: &FirstInsert<'_>,
    now_ms: i64,
) -> Result<Created, StoreError> {
    let (attempt_id, reserved, status) = (first.attempt_id, first.reserved, first.status());
    let open_attempts = first.open_attempts;
    let provider = first.provider.map(str::to_owned);
    let attempt_holds = first.holds.to_vec();
    // Shared with the op, which may run more than once (the writer runs a
    // batch again if another op of it failed), and is its own again once
    // the op has been answered.
    let job = Arc::new(inserted(new, status, now_ms));
    let stored = Arc::clone(&job);
    let lease_owner = lease.owner.to_owned();
    let expires_at = lease.expires_at_ms;
    let sent = store.record_sends.then_some(false);
    let created = store
        .writer
        .write(move |conn| {
            let job = &*stored;
            let existing = |conn: &rusqlite::Connection| {
                fetch_optional(
                    conn,
                    sql::SELECT_JOB_BY_KEY,
                    &[&job.owner, &job.idempotency_key],
                    JobRow::from_sqlite,
                )
            };
            if let Some(refusal) = check_sqlite(conn, &attempt_holds)? {
                // A duplicate is answered, not refused: it books nothing.
                return match existing(conn)? {
                    Some(row) => Ok(Some(Created::Existing(row.try_into()?))),
                    None => Ok(Some(Created::Refused(refusal))),
                };
            }
            let tags = job.attribution.tags.to_stored();
            let entrance = job.entered_through.map(Entrance::as_str);
            let args: [&dyn rusqlite::ToSql; 20] = [
                &job.id,
                &job.owner,
                &job.idempotency_key,
                &job.fingerprint.as_str(),
                &job.route,
                &job.request,
                &now_ms,
                &lease_owner,
                &expires_at,
                &status.as_str(),
                &attempt_id,
                &provider,
                &reserved.nanos,
                &reserved.tokens,
                &open_attempts,
                &job.attribution.key_id,
                &job.attribution.team,
                &tags,
                &entrance,
                &sent,
            ];
            if execute(conn, sql::INSERT_JOB, &args)? == 1 {
                if provider.is_some() {
                    execute(conn, sql::INSERT_FIRST_ATTEMPT, &args)?;
                    book_sqlite(conn, attempt_id, &attempt_holds)?;
                }
                return Ok(None);
            }
            match existing(conn)? {
                Some(row) => Ok(Some(Created::Existing(row.try_into()?))),
                None => Err(vanished(&job.owner, &job.idempotency_key)),
            }
        })
        .await?;
    Ok(created.unwrap_or_else(|| Created::New(Arc::unwrap_or_clone(job), None)))
}

/// The job [`sql::INSERT_JOB`] stores for `new`, as a read of its row would
/// return it: what was inserted, version 0, no result, no error, no winner.
/// SQLite builds it rather than reading the row back: one statement less
/// in the writer's op, which every job waits for (PostgreSQL's insert
/// returns its row). `a_created_job_is_the_row_the_store_holds` (tests)
/// compares the two on both stores.
fn inserted(new: &NewJob, status: JobStatus, now_ms: i64) -> Job {
    Job {
        id: new.id,
        owner: new.owner.clone(),
        idempotency_key: new.idempotency_key.as_str().to_owned(),
        fingerprint: new.fingerprint.clone(),
        route: new.request.route.clone(),
        request: new.canonical.clone(),
        status,
        version: 0,
        completed_by: None,
        result: None,
        error: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        attribution: new.attribution.clone(),
        entered_through: Some(new.entered_through),
    }
}

impl Store {
    /// PostgreSQL's [`Store::create_job`]: through the insert batches, or
    /// in a transaction of its own when holds must be booked with it.
    async fn create_job_pg(
        &self,
        store: &super::postgres::PostgresStore,
        new: &NewJob,
        lease: Lease<'_>,
        first: &FirstInsert<'_>,
        now_ms: i64,
    ) -> Result<Created, StoreError> {
        let (attempt_id, reserved, status) = (first.attempt_id, first.reserved, first.status());
        let (first_provider, attempt_holds) = (first.provider, first.holds);

        let insert = JobInsert {
            id: new.id,
            owner: new.owner.clone(),
            idempotency_key: new.idempotency_key.as_str().to_owned(),
            fingerprint: new.fingerprint.as_str().to_owned(),
            route: new.request.route.clone(),
            request: new.canonical.clone(),
            now_ms,
            lease_owner: lease.owner.to_owned(),
            lease_expires_at_ms: lease.expires_at_ms,
            status: status.as_str(),
            first_attempt: first_provider.map(|provider| (attempt_id, provider.to_owned(), reserved)),
            open_attempts: first.open_attempts,
            attribution: new.attribution.clone(),
            entered_through: new.entered_through,
            sent: self.unsent(),
        };
        let inserted = if attempt_holds.is_empty() {
            store.batches.inserts.write(insert).await?
        } else {
            // Booking may refuse: the insert and the booking share a
            // transaction of their own, outside the batches.
            let mut tx = super::pg_statements::begin(&store.pool).await?;
            let inserted = insert_jobs(&mut *tx, std::slice::from_ref(&insert), store.named()).await?.pop();
            if inserted.is_some() {
                // Holds come only with an attempt 1: it is the one they book.
                if let Some(refusal) = book_pg(&mut tx, attempt_id, attempt_holds, store.named()).await? {
                    // Dropping the transaction takes the job back out.
                    return Ok(Created::Refused(refusal));
                }
            }
            tx.commit().await?;
            inserted
        };
        match inserted {
            Some(row) => Ok(Created::New(row.try_into()?, None)),
            None => match self.job_by_key(&new.owner, new.idempotency_key.as_str()).await? {
                Some(job) => Ok(Created::Existing(job)),
                None => Err(vanished(&new.owner, new.idempotency_key.as_str())),
            },
        }
    }
}

/// An insert that changed nothing found no job under its key either.
fn vanished(owner: &str, idempotency_key: &str) -> StoreError {
    StoreError::Corrupt(format!("insert of ({owner}, {idempotency_key}) stored nothing and found no job"))
}
