//! SQL both backends run unchanged. `$N` placeholders work on SQLite and
//! PostgreSQL alike; anything that must differ lives in `sqlite.rs` or
//! `postgres.rs`.

macro_rules! job_columns {
    () => {
        "id, owner_id, idempotency_key, fingerprint, route, request, status, version, \
         completed_by, result, error, created_at, updated_at"
    };
}

macro_rules! attempt_columns {
    () => {
        "id, job_id, number, provider, state, job_version, outcome, detail, response, \
         resolved_by, started_at, finished_at"
    };
}

pub(super) const INSERT_JOB: &str = concat!(
    "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, route, request, \
     status, version, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $7) \
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING \
     RETURNING ",
    job_columns!()
);

pub(super) const SELECT_JOB_BY_ID: &str = concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = $1");

pub(super) const SELECT_JOB_BY_KEY: &str =
    concat!("SELECT ", job_columns!(), " FROM jobs WHERE owner_id = $1 AND idempotency_key = $2");

pub(super) const SELECT_ATTEMPTS: &str =
    concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE job_id = $1 ORDER BY number");

pub(super) const COUNT_JOBS: &str = "SELECT COUNT(*) FROM jobs WHERE ($1 IS NULL OR owner_id = $1)";
