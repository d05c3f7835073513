//! The state machines are defined once (src/jobs/transitions.rs) and enforced
//! by the database (the migrations' triggers). This proves the two agree, on
//! both backends: for every (from, to) pair the database accepts the UPDATE
//! exactly when `can_become` says it is legal. Also R4's database half: the
//! partial unique index refuses a second open attempt even to SQL that
//! bypasses the code. And where the store builds a job from what it wrote
//! instead of reading it back, what it built is the row it wrote.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestStore};
use intentgate::jobs::{AttemptState, JobStatus};
use sqlx::AssertSqlSafe;

store_matrix!(
    attempt_transitions_match_the_domain,
    job_transitions_match_the_domain,
    one_open_attempt_per_job,
    a_send_mark_only_moves_forward_while_starting,
    open_attempts_are_bounded_by_the_jobs_lanes,
    settling_needs_a_charge,
    racing_drivers_start_one_attempt,
    a_failing_write_spares_the_writes_beside_it,
    a_created_job_is_the_row_the_store_holds,
);

/// Raw SQL against the test database, bypassing the store's code.
enum Raw {
    Sqlite(std::sync::Mutex<rusqlite::Connection>),
    Postgres(sqlx::PgPool),
}

impl Raw {
    async fn open(store: &TestStore) -> Raw {
        // Migrate through the real store first.
        let config = common::test_config(&store.url);
        let real = intentgate::store::Store::connect(&config.store).await.unwrap();
        real.migrate().await.unwrap();
        match store.backend {
            Backend::Sqlite => {
                let path = intentgate::config::StoreConfig::sqlite_path(&store.url).unwrap();
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.pragma_update(None, "foreign_keys", "ON").unwrap();
                conn.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                Raw::Sqlite(std::sync::Mutex::new(conn))
            }
            Backend::Postgres => Raw::Postgres(sqlx::PgPool::connect(&store.url).await.unwrap()),
        }
    }

    async fn exec(&self, sql: String) -> Result<u64, String> {
        let result = match self {
            Raw::Sqlite(conn) => {
                let conn = conn.lock().unwrap();
                return conn.execute(&sql, []).map(|rows| rows as u64).map_err(|e| e.to_string());
            }
            Raw::Postgres(pool) => {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await.map(|r| r.rows_affected())
            }
        };
        result.map_err(|e| e.to_string())
    }

    fn new_uuid(&self) -> &'static str {
        match self {
            Raw::Sqlite(_) => "randomblob(16)",
            Raw::Postgres(_) => "gen_random_uuid()",
        }
    }

    async fn insert_job(&self, key: &str, status: &str) {
        let fingerprint = "0".repeat(64);
        self.exec(format!(
            "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, route, request, status, version, created_at, updated_at) \
             VALUES ({}, 'tester', '{key}', '{fingerprint}', 'chat', '{{}}', '{status}', 0, 0, 0)",
            self.new_uuid()
        ))
        .await
        .unwrap();
    }

    async fn insert_attempt(&self, key: &str, number: i32, state: AttemptState) -> Result<u64, String> {
        // A closed attempt is finished and charged (CHECKs say so).
        let (finished, charged) = if state.is_open() { ("NULL", "NULL") } else { ("1", "0") };
        self.exec(format!(
            "INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at, finished_at, \
             cost_nanos, tokens) \
             SELECT {}, id, {number}, 'p', '{state}', 0, 0, {finished}, {charged}, {charged} \
             FROM jobs WHERE idempotency_key = '{key}'",
            self.new_uuid()
        ))
        .await
    }

    async fn set_attempt(&self, key: &str, to: AttemptState) -> Result<u64, String> {
        let (finished, charged) = if to.is_open() { ("NULL", "NULL") } else { ("2", "0") };
        self.exec(format!(
            "UPDATE attempts SET state = '{to}', finished_at = {finished}, cost_nanos = {charged}, \
             tokens = {charged} \
             WHERE job_id = (SELECT id FROM jobs WHERE idempotency_key = '{key}')"
        ))
        .await
    }

    /// Moves the job to `to`, filling in what the CHECKs demand of a
    /// succeeded job, so only the transition trigger can object.
    async fn set_job(&self, key: &str, to: JobStatus) -> Result<u64, String> {
        let completion = if to == JobStatus::Succeeded {
            format!(
                ", result = '{{}}', version = version + 1, completed_by = \
                 (SELECT a.id FROM attempts a JOIN jobs j ON a.job_id = j.id WHERE j.idempotency_key = '{key}')"
            )
        } else {
            String::new()
        };
        self.exec(format!("UPDATE jobs SET status = '{to}'{completion} WHERE idempotency_key = '{key}'"))
            .await
    }
}

async fn attempt_transitions_match_the_domain(store: TestStore) {
    let raw = Raw::open(&store).await;
    for (i, from) in AttemptState::ALL.into_iter().enumerate() {
        for (j, to) in AttemptState::ALL.into_iter().enumerate() {
            if from == to {
                continue;
            }
            let key = format!("a-{i}-{j}");
            raw.insert_job(&key, "running").await;
            raw.insert_attempt(&key, 1, from).await.unwrap();
            let accepted = raw.set_attempt(&key, to).await;
            assert_eq!(
                accepted.is_ok(),
                from.can_become(to),
                "{from} → {to}: database said {accepted:?}, the domain says {}",
                from.can_become(to)
            );
        }
    }
}

async fn job_transitions_match_the_domain(store: TestStore) {
    let raw = Raw::open(&store).await;
    for (i, from) in JobStatus::ALL.into_iter().enumerate() {
        for (j, to) in JobStatus::ALL.into_iter().enumerate() {
            if from == to {
                continue;
            }
            let key = format!("j-{i}-{j}");
            // Every job has one finished attempt, the winner if it succeeds.
            // A succeeded job is reached the legal way (its CHECKs need the
            // winning attempt); every other state is inserted as is.
            let start = if from == JobStatus::Succeeded { JobStatus::Running } else { from };
            raw.insert_job(&key, start.as_str()).await;
            raw.insert_attempt(&key, 1, AttemptState::Failed).await.unwrap();
            if from == JobStatus::Succeeded {
                raw.set_job(&key, JobStatus::Succeeded).await.unwrap();
            }
            let accepted = raw.set_job(&key, to).await;
            assert_eq!(
                accepted.is_ok(),
                from.can_become(to),
                "{from} → {to}: database said {accepted:?}, the domain says {}",
                from.can_become(to)
            );
        }
    }
    // R1: the intent of a job cannot be rewritten.
    raw.insert_job("immutable", "pending").await;
    let rewrite =
        raw.exec("UPDATE jobs SET request = '{\"x\":1}' WHERE idempotency_key = 'immutable'".into()).await;
    assert!(rewrite.is_err(), "the request of a job is immutable");
}

/// R4 in the schema: at most one `starting`/`unknown` attempt per job.
async fn one_open_attempt_per_job(store: TestStore) {
    let raw = Raw::open(&store).await;
    raw.insert_job("open", "running").await;
    raw.insert_attempt("open", 1, AttemptState::Unknown).await.unwrap();
    let second = raw.insert_attempt("open", 2, AttemptState::Starting).await;
    assert!(second.is_err(), "a second open attempt must be refused by the index: {second:?}");
    raw.insert_attempt("open", 2, AttemptState::Failed).await.expect("closed attempts are not limited");
    let same_number = raw.insert_attempt("open", 2, AttemptState::Failed).await;
    assert!(same_number.is_err(), "UNIQUE (job_id, number)");
}

/// Whether an attempt was sent, in the schema: the mark moves from "not
/// yet" to "sent" (with its time, never without), only while the attempt is
/// `starting`, and never back — so recovery's "never sent" cannot be
/// written over a send, whatever SQL is run.
async fn a_send_mark_only_moves_forward_while_starting(store: TestStore) {
    let raw = Raw::open(&store).await;
    let of = |key: &str| format!("(SELECT id FROM jobs WHERE idempotency_key = '{key}')");
    let set = |key: &str, values: &str| format!("UPDATE attempts SET {values} WHERE job_id = {}", of(key));
    // Written by a release that did not record sends: left unrecorded.
    raw.insert_job("unrecorded", "running").await;
    raw.insert_attempt("unrecorded", 1, AttemptState::Starting).await.unwrap();
    assert!(raw.exec(set("unrecorded", "sent = TRUE, sent_at = 5")).await.is_err(), "not recorded, kept so");
    assert!(raw.exec(set("unrecorded", "sent = FALSE")).await.is_err());
    for key in ["marked", "failed"] {
        raw.insert_job(key, "running").await;
        let insert = format!(
            "INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at, sent) \
             SELECT {}, {}, 1, 'p', 'starting', 0, 0, FALSE",
            raw.new_uuid(),
            of(key)
        );
        raw.exec(insert).await.unwrap();
    }
    assert!(raw.exec(set("marked", "sent = TRUE")).await.is_err(), "sent needs its time");
    raw.exec(set("marked", "sent = TRUE, sent_at = 5")).await.expect("not yet → sent, while starting");
    assert!(raw.exec(set("marked", "sent = FALSE, sent_at = NULL")).await.is_err(), "never back");
    assert!(raw.exec(set("marked", "sent_at = 6")).await.is_err(), "its time is kept");
    raw.exec(set(
        "failed",
        "state = 'failed', outcome = 'not_sent', finished_at = 1, cost_nanos = 0, tokens = 0",
    ))
    .await
    .unwrap();
    assert!(raw.exec(set("failed", "sent = TRUE, sent_at = 5")).await.is_err(), "only while starting");
}

/// R4 with a hedge, in the schema: a job created with `open_attempts = 2`
/// holds at most two open attempts, one per lane; a third lane, a lane
/// taken twice, or rewriting either number is refused to SQL that bypasses
/// the code. A job without a hedge keeps the one lane.
async fn open_attempts_are_bounded_by_the_jobs_lanes(store: TestStore) {
    let raw = Raw::open(&store).await;
    let insert = |key: &str, number: i32, lane: i32, state: &str| {
        let (finished, charged) = if state == "failed" { ("1", "0") } else { ("NULL", "NULL") };
        format!(
            "INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at, finished_at, \
             cost_nanos, tokens, lane) SELECT {}, id, {number}, 'p', '{state}', 0, 0, {finished}, {charged}, \
             {charged}, {lane} FROM jobs WHERE idempotency_key = '{key}'",
            raw.new_uuid()
        )
    };
    raw.exec(format!(
        "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, route, request, status, version, \
         created_at, updated_at, open_attempts) VALUES ({}, 'tester', 'hedged', '{}', 'chat', '{{}}', \
         'running', 0, 0, 0, 2)",
        raw.new_uuid(),
        "0".repeat(64)
    ))
    .await
    .unwrap();
    raw.exec(insert("hedged", 1, 1, "starting")).await.expect("lane 1");
    raw.exec(insert("hedged", 2, 2, "unknown")).await.expect("lane 2: the job's bound is 2");
    let third = raw.exec(insert("hedged", 3, 3, "starting")).await;
    assert!(third.is_err(), "a third open attempt is past the job's bound: {third:?}");
    let same_lane = raw.exec(insert("hedged", 3, 2, "starting")).await;
    assert!(same_lane.is_err(), "one open attempt per lane: {same_lane:?}");
    raw.exec(insert("hedged", 3, 2, "failed")).await.expect("closed attempts hold no lane");
    let moved = raw.exec("UPDATE attempts SET lane = 1 WHERE number = 2".into()).await;
    assert!(moved.is_err(), "a lane never changes: {moved:?}");
    let widened = raw.exec("UPDATE jobs SET open_attempts = 3 WHERE idempotency_key = 'hedged'".into()).await;
    assert!(widened.is_err(), "a job's bound never changes: {widened:?}");

    raw.insert_job("plain", "running").await;
    raw.exec(insert("plain", 1, 1, "starting")).await.expect("lane 1");
    let beside = raw.exec(insert("plain", 2, 2, "starting")).await;
    assert!(beside.is_err(), "a job without a hedge has one lane: {beside:?}");
    let past_any = raw.exec(insert("plain", 2, 4, "failed")).await;
    assert!(past_any.is_err(), "no job has a fourth lane: {past_any:?}");
}

/// Budgets: an attempt cannot leave its open states without its charge,
/// so a meter's reservation is never left behind.
async fn settling_needs_a_charge(store: TestStore) {
    let raw = Raw::open(&store).await;
    raw.insert_job("charge", "running").await;
    raw.insert_attempt("charge", 1, AttemptState::Starting).await.unwrap();
    let uncharged = raw
        .exec(
            "UPDATE attempts SET state = 'failed', finished_at = 2 \
             WHERE job_id = (SELECT id FROM jobs WHERE idempotency_key = 'charge')"
                .into(),
        )
        .await;
    assert!(uncharged.is_err(), "closing an attempt without its charge must be refused: {uncharged:?}");
    raw.set_attempt("charge", AttemptState::Failed).await.expect("with its charge it closes");
}

/// R4 under concurrency: twenty drivers race to start an attempt of one job;
/// exactly one succeeds, the others are refused (by the domain check or, when
/// they raced past it, by the partial unique index).
async fn racing_drivers_start_one_attempt(store: TestStore) {
    use std::sync::Arc;

    use intentgate::jobs::{IdempotencyKey, NewJob, now_ms};
    use intentgate::store::{Lease, Reservation, StartOutcome};

    let config = common::test_config(&store.url);
    let real = intentgate::store::Store::connect(&config.store).await.unwrap();
    real.migrate().await.unwrap();
    let new =
        NewJob::of_body("alice".into(), IdempotencyKey::parse("race").unwrap(), &common::chat_body("x"))
            .unwrap();
    let lease = Lease { owner: "test", expires_at_ms: now_ms() + 60_000 };
    let job = match real.create_job(&new, lease, None, 1, now_ms()).await.unwrap() {
        intentgate::store::Created::New(job, None) => job,
        other => panic!("{other:?}"),
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (real, barrier) = (real.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                real.start_attempt(job.id, &format!("p{i}"), &Reservation::default(), (1, None), now_ms())
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut started = 0;
    for task in tasks {
        if matches!(task.await.unwrap(), StartOutcome::Started(_)) {
            started += 1;
        }
    }
    assert_eq!(started, 1, "exactly one attempt started");
    assert_eq!(real.attempts(job.id).await.unwrap().len(), 1);
}

/// On SQLite, concurrent writes share one transaction (group commit), each
/// in its own savepoint; on PostgreSQL each has its own. Either way a write
/// that the schema refuses fails alone: 40 tasks released by one barrier,
/// half inserting jobs and half re-inserting a contract run whose id exists
/// (a primary-key violation), leave all 20 jobs committed and 20 errors.
async fn a_failing_write_spares_the_writes_beside_it(store: TestStore) {
    use std::sync::Arc;

    use intentgate::jobs::{IdempotencyKey, NewJob, now_ms};
    use intentgate::store::{ContractRecord, Created, Lease, Reservation, StoreError};

    let config = common::test_config(&store.url);
    let real = intentgate::store::Store::connect(&config.store).await.unwrap();
    real.migrate().await.unwrap();
    let run = ContractRecord {
        id: uuid::Uuid::now_v7(),
        route: "chat".into(),
        provider: "p".into(),
        suite_fingerprint: "a".repeat(64),
        provider_fingerprint: "b".repeat(64),
        passed: true,
        started_at: now_ms(),
        finished_at: now_ms(),
        report: "{}".into(),
    };
    real.record_contract_run(&run, &[]).await.unwrap();

    let barrier = Arc::new(tokio::sync::Barrier::new(40));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (real, barrier, run) = (real.clone(), barrier.clone(), run.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                if i % 2 == 0 {
                    let key = IdempotencyKey::parse(&format!("k{i}")).unwrap();
                    let new = NewJob::of_body("alice".into(), key, &common::chat_body("x")).unwrap();
                    let lease = Lease { owner: "test", expires_at_ms: now_ms() + 60_000 };
                    match real
                        .create_job(&new, lease, Some(("p", &Reservation::default())), 1, now_ms())
                        .await
                    {
                        Ok(Created::New(_, Some(_))) => Ok(()),
                        other => panic!("job {i}: {other:?}"),
                    }
                } else {
                    real.record_contract_run(&run, &[]).await
                }
            })
        })
        .collect();
    let mut refused = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => {}
            Err(StoreError::Database(_)) => refused += 1,
            Err(other) => panic!("a refused write must be a database error, not {other:?}"),
        }
    }
    assert_eq!(refused, 20, "every duplicate run is refused");
    assert_eq!(real.count_jobs(Some("alice")).await.unwrap(), 20, "every job beside them is stored");
    for i in (0..40).step_by(2) {
        let job = real.job_by_key("alice", &format!("k{i}")).await.unwrap().unwrap();
        assert_eq!(job.status, JobStatus::Running);
    }
}

/// SQLite's store builds a new job (and its attempt 1) from the values it
/// inserted rather than reading them back: what the store hands the engine
/// is the row as a later read finds it, pending or running, and so is the
/// job the compare-and-swap completes.
async fn a_created_job_is_the_row_the_store_holds(store: TestStore) {
    use intentgate::jobs::{Amounts, IdempotencyKey, NewJob, now_ms};
    use intentgate::store::{CasOutcome, Created, Lease, Reservation};

    let config = common::test_config(&store.url);
    let real = intentgate::store::Store::connect(&config.store).await.unwrap();
    real.migrate().await.unwrap();
    let lease = Lease { owner: "test", expires_at_ms: now_ms() + 60_000 };
    let body = common::chat_body("x");
    let pending = NewJob::of_body("alice".into(), IdempotencyKey::parse("pending").unwrap(), &body).unwrap();
    let Created::New(job, None) = real.create_job(&pending, lease, None, 1, now_ms()).await.unwrap() else {
        panic!("a new job without an attempt")
    };
    assert_eq!(job.status, JobStatus::Pending);
    assert_eq!(Some(&job), real.job(job.id).await.unwrap().as_ref(), "a pending job as stored");

    let running = NewJob::of_body("alice".into(), IdempotencyKey::parse("running").unwrap(), &body).unwrap();
    let first = Some(("p", &Reservation::default()));
    let Created::New(job, Some(attempt)) =
        real.create_job(&running, lease, first, 2, now_ms()).await.unwrap()
    else {
        panic!("a new job with its attempt 1")
    };
    assert_eq!(job.status, JobStatus::Running);
    assert_eq!(Some(&job), real.job(job.id).await.unwrap().as_ref(), "a running job as stored");
    assert_eq!(vec![*attempt], real.attempts(job.id).await.unwrap(), "its attempt 1 as stored");

    let charge = (Amounts { nanos: 0, tokens: 0 }, None);
    let attempt = &real.attempts(job.id).await.unwrap()[0];
    let CasOutcome::Won(won) =
        real.complete_job(attempt, "{}", ("{}", false), charge, now_ms()).await.unwrap()
    else {
        panic!("the only attempt wins")
    };
    assert_eq!(won.status, JobStatus::Succeeded);
    assert_eq!(Some(&*won), real.job(job.id).await.unwrap().as_ref(), "a won job as stored");
}
