//! SQL both backends run unchanged. `$N` placeholders work on SQLite and
//! PostgreSQL alike; anything that must differ lives in `sqlite.rs` or
//! `postgres.rs`. Every UPDATE that changes a state names, in its WHERE, the
//! state(s) it leaves.

macro_rules! job_columns {
    () => {
        "id, owner_id, idempotency_key, fingerprint, route, request, status, version, \
         completed_by, result, error, created_at, updated_at, key_id, team, tags, entered_through"
    };
}

macro_rules! attempt_columns {
    () => {
        "id, job_id, number, provider, state, job_version, outcome, detail, \
         resolved_by, started_at, finished_at, reserved_nanos, reserved_tokens, cost_nanos, \
         tokens, usage, lane, unknown_at, sent, sent_at, continues"
    };
}

// ---- jobs -------------------------------------------------------------------

/// SQLite: R2, the unique constraint decides; the inserting instance holds
/// the lease from the first moment, so a crash right after the insert is
/// recovered. `$10` is the status: `pending`, or `running` when the first
/// attempt is inserted with it; `$15` its bound on open attempts. One row
/// changed: the job is new, and the store builds it from what it inserted
/// (`store::jobs::inserted`). (PostgreSQL: [`INSERT_JOBS_PG`].)
///
/// No `RETURNING` on SQLite's hot path, here or in [`COMPLETE_JOB_CAS`]:
/// SQLite gathers a statement's returned rows in an ephemeral table (a
/// b-tree built, filled and freed each time the statement runs), where
/// reading the row back after the write is one seek on a page the write
/// has just touched, and building it from the values written is none.
pub(super) const INSERT_JOB: &str = "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, route, request, \
     status, version, created_at, updated_at, lease_owner, lease_expires_at, open_attempts, key_id, team, tags, \
     entered_through) VALUES ($1, $2, $3, $4, $5, $6, $10, 0, $7, $7, $8, $9, $15, $16, $17, $18, $19) \
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING";

/// SQLite: attempt 1 of a job inserted by [`INSERT_JOB`] in the same op.
/// (`$11` attempt id, `$12` provider, `$13`/`$14` its reservation in
/// nano-units and tokens, as in the PostgreSQL form below; `$20` its
/// `sent`, `Store::unsent`.)
pub(super) const INSERT_FIRST_ATTEMPT: &str = "INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at, \
     reserved_nanos, reserved_tokens, sent) VALUES ($11, $1, 1, $12, 'starting', 0, $7, $13, $14, $20)";

/// PostgreSQL: a batch of new jobs (`pg_batches.rs`) and, for each job
/// that was inserted and has a provider, its attempt 1 `starting` — one
/// statement, one commit. `$1`…`$15` are arrays, one element per job, in
/// the order of [`INSERT_JOB`]'s parameters. Jobs are inserted in key order,
/// so two batches racing on the same keys wait for each other in one order
/// and cannot deadlock. A key that exists (or appears twice in the batch)
/// inserts nothing and returns no row: the caller reads the job that has it.
pub(super) const INSERT_JOBS_PG: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
     $6::text[], $7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::uuid[], $12::text[], \
     $13::bigint[], $14::bigint[], $15::integer[], $16::uuid[], $17::text[], $18::text[], $19::text[], \
     $20::boolean[]) \
     AS i(id, owner_id, idempotency_key, fingerprint, route, request, at_ms, lease_owner, lease_expires_at, \
     status, attempt_id, provider, reserved_nanos, reserved_tokens, open_attempts, key_id, team, tags, \
     entered_through, sent)), \
     job AS (INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, route, request, status, version, \
     created_at, updated_at, lease_owner, lease_expires_at, open_attempts, key_id, team, tags, entered_through) \
     SELECT id, owner_id, idempotency_key, fingerprint, route, request, status, 0, at_ms, at_ms, \
     lease_owner, lease_expires_at, open_attempts, key_id, team, tags, entered_through FROM input \
     ORDER BY owner_id, idempotency_key \
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING RETURNING ",
    job_columns!(),
    "), attempt AS (INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at, \
     reserved_nanos, reserved_tokens, sent) SELECT i.attempt_id, job.id, 1, i.provider, 'starting', job.version, \
     i.at_ms, i.reserved_nanos, i.reserved_tokens, i.sent FROM job JOIN input i ON i.id = job.id \
     WHERE i.attempt_id IS NOT NULL) SELECT ",
    job_columns!(),
    " FROM job"
);

pub(super) const SELECT_JOB_BY_ID: &str = concat!("SELECT ", job_columns!(), " FROM jobs WHERE id = $1");

/// The job `$1` if `$2` owns it (`$2` NULL: whoever does, for an admin).
/// The owner is in the WHERE, not compared after the read, so another
/// owner's job is a miss that loads nothing: it takes as long as a missing
/// id and cannot be told from one by timing. `$2` is cast so PostgreSQL
/// knows its type when it is NULL.
pub(super) const SELECT_JOB_FOR_OWNER: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM jobs WHERE id = $1 AND (CAST($2 AS TEXT) IS NULL OR owner_id = CAST($2 AS TEXT))"
);

pub(super) const SELECT_JOB_BY_KEY: &str =
    concat!("SELECT ", job_columns!(), " FROM jobs WHERE owner_id = $1 AND idempotency_key = $2");

pub(super) const COUNT_JOBS: &str = "SELECT COUNT(*) FROM jobs WHERE ($1 IS NULL OR owner_id = $1)";

pub(super) const SET_JOB_STATUS: &str = "UPDATE jobs SET status = $3, error = COALESCE($4, error), updated_at = $5 \
     WHERE id = $1 AND status = $2";

/// A driver fails the job it holds the lease of (`$5`): the lease goes with
/// the same write, so that a new attempt by hand can claim it at once.
pub(super) const FAIL_JOB: &str = "UPDATE jobs SET status = 'failed', error = $3, updated_at = $4, \
     lease_owner = CASE WHEN lease_owner = $5 THEN NULL ELSE lease_owner END, \
     lease_expires_at = CASE WHEN lease_owner = $5 THEN NULL ELSE lease_expires_at END \
     WHERE id = $1 AND status = $2";

/// R6: the only statement that writes a job's result, in the one form
/// each backend runs (SQLite one job at a time, PostgreSQL a batch):
/// `$from` names where the values come from, the other arguments the job,
/// the version it must still have, the result, the delivering attempt and
/// the time. Zero rows = another attempt already won (or the job was
/// cancelled meanwhile). A job that failed meanwhile still takes the answer
/// (`failed → succeeded`: the work was done; the error it had no longer
/// applies). A completed job needs no driver: the lease goes with the same
/// write — unless another attempt of a hedged job is still `starting`
/// (`kept_while_trailing!`). Each backend hands back the job as the write
/// left it, so that whoever waits on the job needs no read of its own.
macro_rules! complete_job_cas {
    ($from:literal, $job:literal, $version:literal, $result:literal, $attempt:literal, $now:literal) => {
        concat!(
            "UPDATE jobs SET status = 'succeeded', result = ",
            $result,
            ", completed_by = ",
            $attempt,
            ", error = NULL, version = jobs.version + 1, updated_at = ",
            $now,
            ", ",
            kept_while_trailing!("lease_owner", $attempt),
            ", ",
            kept_while_trailing!("lease_expires_at", $attempt),
            $from,
            " WHERE jobs.id = ",
            $job,
            " AND jobs.version = ",
            $version,
            " AND jobs.completed_by IS NULL \
             AND (jobs.status = 'running' OR jobs.status = 'unknown' OR jobs.status = 'failed')"
        )
    };
}

/// A lease column as the result's write leaves it: kept while another
/// attempt of the job than `$attempt`, the one delivering, is `starting` —
/// the hedge's loser, still in flight, which its driver goes on listening
/// to (and renews the lease for) until it ends. Were the lease gone with the
/// result, a driver that died meanwhile would leave that attempt `starting`
/// for good: no sweep takes over a job without a lease. With it, the lease
/// expires and the sweep makes the attempt `unknown`, as for any attempt
/// whose driver died. A job that never hedges (`open_attempts = 1`) never
/// runs the lookup.
macro_rules! kept_while_trailing {
    ($column:literal, $attempt:literal) => {
        concat!(
            $column,
            " = CASE WHEN jobs.open_attempts > 1 AND EXISTS (SELECT 1 FROM attempts sibling \
             WHERE sibling.job_id = jobs.id AND sibling.state = 'starting' AND sibling.id <> ",
            $attempt,
            ") THEN jobs.",
            $column,
            " END"
        )
    };
}

/// The states from which an attempt may still deliver a result. (Here and
/// in the compare-and-swap, three or more states are compared one by one:
/// SQLite builds a table for an `IN` list of three or more constants each
/// time the statement runs; see migration 0007.)
macro_rules! deliverable {
    () => {
        "(state = 'starting' OR state = 'unknown' OR state = 'abandoned')"
    };
}

/// SQLite: the compare-and-swap, if attempt `$4` may still deliver (the
/// writer's transaction holds the database's only write lock, so nothing
/// moves the attempt meanwhile). One row changed: it won, and
/// [`SELECT_JOB_BY_ID`] reads the job as it left it, in the same
/// transaction (no `RETURNING`: see [`INSERT_JOB`]).
pub(super) const COMPLETE_JOB_CAS: &str = concat!(
    complete_job_cas!("", "$1", "$2", "$3", "$4", "$5"),
    " AND EXISTS (SELECT 1 FROM attempts WHERE id = $4 AND ",
    deliverable!(),
    ")"
);

/// SQLite: the delivering attempt settles as `$2` (`succeeded` if its CAS
/// won, else `superseded`), charged `$5` nano-units and `$6` tokens for
/// the usage `$7`, keeping its raw answer `$3` (NULL when the job's result
/// holds it whole). Zero rows: it could not deliver.
pub(super) const SETTLE_DELIVERED: &str = concat!(
    "UPDATE attempts SET state = $2, outcome = 'ok', response = $3, finished_at = $4, \
     cost_nanos = $5, tokens = $6, usage = $7 WHERE id = $1 AND ",
    deliverable!()
);

/// Who won the compare-and-swap, for the loser's log line.
pub(super) const SELECT_WINNER: &str = "SELECT completed_by FROM jobs WHERE id = $1";

/// PostgreSQL: one delivering attempt (a batch of one, `pg_batches.rs`):
/// the deliverability check, the compare-and-swap and the attempt's
/// settling in one statement, with [`COMPLETE_JOBS_PG`]'s parameters as
/// scalars and its row (`settled_attempt` aside). Every lookup is by
/// primary key, so its prepared plan stays right however the tables grow;
/// the batch form is planned per batch instead.
pub(super) const COMPLETE_JOB_PG: &str = concat!(
    "WITH deliverable AS (SELECT id FROM attempts WHERE id = $4 AND ",
    deliverable!(),
    " FOR UPDATE), won AS (",
    complete_job_cas!("", "$1", "$2", "$3", "$4", "$5"),
    " AND EXISTS (SELECT 1 FROM deliverable) RETURNING ",
    job_columns!(),
    "), settled AS (UPDATE attempts SET \
     state = CASE WHEN EXISTS (SELECT 1 FROM won) THEN 'succeeded' ELSE 'superseded' END, \
     outcome = 'ok', response = CASE WHEN EXISTS (SELECT 1 FROM won) AND $10 THEN NULL ELSE $6 END, \
     finished_at = $5, cost_nanos = $7, tokens = $8, usage = $9 \
     WHERE id IN (SELECT id FROM deliverable) RETURNING id AS settled_attempt, state) \
     SELECT settled.settled_attempt, settled.state AS settled_as, \
     COALESCE(won.completed_by, (SELECT completed_by FROM jobs WHERE id = $1)) AS winner, won.* \
     FROM settled LEFT JOIN won ON true"
);

/// PostgreSQL: for a batch of delivering attempts (`pg_batches.rs`), the
/// deliverability check, the compare-and-swap and each attempt's settling
/// in one statement (one round trip, one commit). `$1`…`$10` are arrays, one
/// element per attempt: job, job version, result, attempt, time, raw
/// response, charge (nano-units, tokens), reported usage, and whether the
/// result holds the raw response whole (a winner's is then not kept twice). Attempt rows
/// are locked first, in id order (`FOR UPDATE`, as the SQLite op holds the
/// write lock), each looked up by its primary key: a lateral lookup, not a
/// join, so that a plan cached while the table was small (a hash join over
/// a sequential scan, which the planner then prefers) cannot turn every
/// batch into a scan of `attempts` as the table grows. A row per attempt that could deliver: `settled_as` says
/// whether it won (`succeeded`, the job's columns beside it) or came second
/// (`superseded`; `winner` names the attempt that won, if visible). Two
/// attempts of one job in the same batch: the UPDATE takes one of them,
/// the other is superseded by it.
pub(super) const COMPLETE_JOBS_PG: &str = concat!(
    "WITH input AS (SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::uuid[], $5::bigint[], \
     $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::bool[]) AS i(job_id, job_version, answer, \
     attempt_id, at_ms, raw_response, charged_nanos, charged_tokens, reported_usage, raw_in_result)), \
     deliverable AS (SELECT open.id FROM (SELECT attempt_id FROM input ORDER BY attempt_id) wanted \
     CROSS JOIN LATERAL (SELECT id FROM attempts WHERE id = wanted.attempt_id AND ",
    deliverable!(),
    " LIMIT 1 FOR UPDATE) open), won AS (",
    complete_job_cas!(
        " FROM input",
        "input.job_id",
        "input.job_version",
        "input.answer",
        "input.attempt_id",
        "input.at_ms"
    ),
    " AND input.attempt_id IN (SELECT id FROM deliverable) RETURNING ",
    job_columns!(),
    "), settled AS (UPDATE attempts SET \
     state = CASE WHEN attempts.id IN (SELECT completed_by FROM won) THEN 'succeeded' ELSE 'superseded' END, \
     outcome = 'ok', response = CASE WHEN attempts.id IN (SELECT completed_by FROM won) \
     AND input.raw_in_result THEN NULL ELSE input.raw_response END, finished_at = input.at_ms, \
     cost_nanos = input.charged_nanos, tokens = input.charged_tokens, usage = input.reported_usage \
     FROM input WHERE attempts.id = input.attempt_id AND attempts.id IN (SELECT id FROM deliverable) \
     RETURNING attempts.id AS settled_attempt, attempts.job_id AS settled_job, attempts.state AS settled_as) \
     SELECT settled.settled_attempt, settled.settled_as, \
     COALESCE(won.completed_by, (SELECT completed_by FROM jobs WHERE id = settled.settled_job)) AS winner, won.* \
     FROM settled LEFT JOIN won ON won.id = settled.settled_job"
);

/// PostgreSQL: a waiter on a replica other than the job's driver (`$2` is
/// the waiter's instance) asks for the job's settle to be announced
/// (migration 0005, `jobs_notify_settled`). Zero rows: the job has settled
/// already, or this instance drives it (and wakes its own waiters).
pub(super) const MARK_AWAITED: &str = "UPDATE jobs SET awaited = true \
     WHERE id = $1 AND status IN ('pending', 'running') AND lease_owner IS DISTINCT FROM $2";

/// R10: take the lease if it is free or expired. Not re-entrant: a lease
/// this instance holds belongs to one of its drives, and a second task of
/// the same instance (a resume, the sweep) must not drive the job beside it.
pub(super) const CLAIM_LEASE: &str = "UPDATE jobs SET lease_owner = $2, lease_expires_at = $3 \
     WHERE id = $1 AND (lease_owner IS NULL OR lease_expires_at < $4)";

pub(super) const RENEW_LEASE: &str =
    "UPDATE jobs SET lease_expires_at = $3 WHERE id = $1 AND lease_owner = $2";

pub(super) const RELEASE_LEASE: &str =
    "UPDATE jobs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1 AND lease_owner = $2";

/// Jobs whose driver is gone: an expired lease, whatever the job's status
/// (a job cancelled while its dead driver's attempt was `starting` still has
/// that attempt to settle), or no lease at all on a job still to be driven
/// (let go on by the operator CLI).
pub(super) const EXPIRED_LEASES: &str = "SELECT id, status FROM jobs \
     WHERE lease_expires_at < $1 \
        OR (lease_expires_at IS NULL AND status IN ('pending', 'running')) \
     ORDER BY lease_expires_at LIMIT $2";

/// Jobs left `unknown` with no open attempt: their attempt was settled but
/// the move back to `running` never happened (the process died between the
/// two writes, or an operator settled the attempt before its job was marked
/// `unknown`). The sweep resumes them.
pub(super) const STRANDED_UNKNOWN: &str = "SELECT id FROM jobs WHERE status = 'unknown' \
     AND NOT EXISTS (SELECT 1 FROM attempts WHERE attempts.job_id = jobs.id \
                     AND attempts.state IN ('starting', 'unknown')) \
     LIMIT $1";

pub(super) const LIST_JOBS: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM jobs WHERE ($1 IS NULL OR status = $1) AND ($2 IS NULL OR owner_id = $2) \
     AND ($3 IS NULL OR route = $3) ORDER BY id DESC LIMIT $4"
);

// ---- attempts ---------------------------------------------------------------

pub(super) const SELECT_ATTEMPTS: &str =
    concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE job_id = $1 ORDER BY number");

/// The answer attempt `$1` received, which the attempt columns leave out.
pub(super) const SELECT_ATTEMPT_RESPONSE: &str = "SELECT response FROM attempts WHERE id = $1";

/// Attempts `unknown` now (of owner `$1`, or all), the one open longest —
/// waiting longest for a human — first, at most `$2`: an attempt row (every
/// column of `attempt_columns!`, in order) and three of its job's.
pub(super) const SELECT_UNKNOWN_QUEUE: &str = concat!(
    "SELECT a.*, j.owner_id, j.route, j.idempotency_key FROM (SELECT ",
    attempt_columns!(),
    " FROM attempts WHERE state = 'unknown') a JOIN jobs j ON j.id = a.job_id \
     WHERE CAST($1 AS TEXT) IS NULL OR j.owner_id = CAST($1 AS TEXT) ORDER BY a.started_at, a.id LIMIT $2"
);

pub(super) const SELECT_ATTEMPT: &str =
    concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE job_id = $1 AND number = $2");

/// Written before the provider request leaves (R5): a crash cannot hide a
/// call. `$7`/`$8`: its reservation (nano-units, tokens); `$10` the attempt
/// whose cut stream it continues, if any; `$11` its `sent`: not yet sent
/// ([`MARK_SENT`] says when it is), or NULL where sends are not recorded.
pub(super) const INSERT_ATTEMPT: &str = concat!(
    "INSERT INTO attempts (id, job_id, number, provider, state, job_version, started_at, \
     reserved_nanos, reserved_tokens, lane, sent, continues) \
     VALUES ($1, $2, $3, $4, 'starting', $5, $6, $7, $8, $9, $11, $10) RETURNING ",
    attempt_columns!()
);

/// One attempt leaves state `$2` for `$3`. `finished_at` is NULL exactly
/// for the open states, and the charge (`$9` nano-units, `$10` tokens) is
/// set exactly for the closed ones (CHECKs say so). A new detail `$5` is
/// added after the one the attempt has, never in its place: why it became
/// `unknown` ("stream broke off") stays beside how it was settled. `$11`
/// is the time, kept as `unknown_at` when the attempt becomes `unknown`.
pub(super) const SETTLE_ATTEMPT: &str = "UPDATE attempts SET state = $3, outcome = COALESCE($4, outcome), \
     detail = CASE WHEN $5 IS NULL THEN detail WHEN detail IS NULL OR detail = $5 THEN $5 \
                   ELSE detail || '; then: ' || $5 END, \
     response = COALESCE($6, response), \
     resolved_by = COALESCE($7, resolved_by), finished_at = $8, \
     cost_nanos = COALESCE($9, cost_nanos), tokens = COALESCE($10, tokens), \
     unknown_at = CASE WHEN $3 = 'unknown' THEN $11 ELSE unknown_at END \
     WHERE id = $1 AND state = $2";

/// Committed before attempt `$1`'s request is handed to its provider, at
/// `$2`. No row changed: the attempt is no longer `starting` (a sweep that
/// took the job over settled it) and must not be sent.
pub(super) const MARK_SENT: &str =
    "UPDATE attempts SET sent = TRUE, sent_at = $2 WHERE id = $1 AND state = 'starting' AND sent = FALSE";

/// PostgreSQL: [`MARK_SENT`] for a batch of attempts `$1` (`pg_batches.rs`),
/// all at `$2`, the batch's latest time. Each is found by its primary key,
/// whatever the batch's size, so the prepared plan cannot go stale.
/// Returns the ids it marked.
pub(super) const MARK_SENT_PG: &str = "UPDATE attempts SET sent = TRUE, sent_at = $2 \
     WHERE id = ANY($1::uuid[]) AND state = 'starting' AND sent = FALSE RETURNING id";

/// A hedged stream's first chunk claims the client's stream for its
/// attempt: the job's version moves on from `$2`, the version every attempt
/// of the race read, so only the claimer's answer (written with the new
/// version, [`CLAIMED_STREAM_ATTEMPT`]) can pass the result's
/// compare-and-swap; the others are `superseded`, whenever they end.
pub(super) const CLAIM_STREAM: &str = "UPDATE jobs SET version = version + 1, updated_at = $3 \
     WHERE id = $1 AND version = $2 AND completed_by IS NULL";

/// With [`CLAIM_STREAM`]: the claiming attempt `$1` read version `$2` now.
pub(super) const CLAIMED_STREAM_ATTEMPT: &str =
    "UPDATE attempts SET job_version = $2 WHERE id = $1 AND state = 'starting'";

/// Recovery: attempt `$1` was written and never sent (its mark still
/// says so), so it fails as `not_sent` with detail `$2` at `$3`, charged
/// nothing. The `WHERE` is the guard: a driver that marks it sent first
/// wins, and the attempt is then made `unknown` by [`STARTING_TO_UNKNOWN`].
pub(super) const UNSENT_TO_FAILED: &str = "UPDATE attempts SET state = 'failed', outcome = 'not_sent', detail = $2, \
     finished_at = $3, cost_nanos = 0, tokens = 0 WHERE id = $1 AND state = 'starting' AND sent = FALSE";

/// Recovery: the process that wrote these `starting` attempts is gone and
/// may have sent them, so they become `unknown` — never `failed`.
pub(super) const STARTING_TO_UNKNOWN: &str = "UPDATE attempts SET state = 'unknown', outcome = 'unknown', detail = $2, \
     unknown_at = $3 WHERE job_id = $1 AND state = 'starting'";

pub(super) const UNKNOWN_ATTEMPTS_OF_PROVIDER: &str = concat!(
    "SELECT ",
    attempt_columns!(),
    " FROM attempts WHERE provider = $1 AND state = 'unknown' AND started_at <= $2 ORDER BY started_at"
);

pub(super) const ATTEMPT_NUMBER: &str = "SELECT number FROM attempts WHERE id = $1";

pub(super) const UNKNOWN_PROVIDERS: &str = "SELECT DISTINCT provider FROM attempts WHERE state = 'unknown'";

pub(super) const COUNT_UNKNOWN_ATTEMPTS: &str = "SELECT COUNT(*) FROM attempts WHERE state = 'unknown'";

pub(super) const UNKNOWN_BY_PROVIDER: &str =
    "SELECT provider, COUNT(*) FROM attempts WHERE state = 'unknown' GROUP BY provider";

// ---- budgets and rate limits (src/budgets) -----------------------------------

/// SQLite: books `$4` more into a meter's `held`. The writer checked the
/// hold first (`check_sqlite`); the WHERE on the limit `$5` keeps the
/// statement safe on its own. PostgreSQL books with [`BOOK_HOLDS_PG`].
pub(super) const RESERVE_HOLD: &str = "INSERT INTO meters (meter, window_start, window_end, held, used) \
     VALUES ($1, $2, $3, $4, 0) ON CONFLICT (meter, window_start) DO UPDATE \
     SET held = meters.held + excluded.held \
     WHERE meters.held + meters.used + excluded.held <= $5 RETURNING held";

/// Counts `$4` used at once (a request of a rate limit), under the same
/// condition as [`RESERVE_HOLD`].
pub(super) const COUNT_USE: &str = "INSERT INTO meters (meter, window_start, window_end, held, used) \
     VALUES ($1, $2, $3, 0, $4) ON CONFLICT (meter, window_start) DO UPDATE \
     SET used = meters.used + excluded.used \
     WHERE meters.held + meters.used + excluded.used <= $5 RETURNING used";

pub(super) const INSERT_HOLD: &str =
    "INSERT INTO holds (attempt_id, meter, window_start, unit, amount) VALUES ($1, $2, $3, $4, $5)";

/// `(used, held)` of one meter in one window.
pub(super) const SELECT_METER: &str = "SELECT used, held FROM meters WHERE meter = $1 AND window_start = $2";

/// PostgreSQL: books a set of holds in one statement. `$1`…`$6` are arrays
/// (meter, window start, window end, amount, limit, unit), sorted by meter
/// so that concurrent writers lock meter rows in one order; `$7` the attempt
/// whose `holds` rows are written (request counts have none). Returns
/// the `(meter, window_start)` of each hold that fitted: fewer rows than
/// were asked means the caller rolls back.
/// A meter row that does not exist yet takes its amount unchecked (the
/// caller checks a hold against an empty meter first).
pub(super) const BOOK_HOLDS_PG: &str = "WITH wanted AS ( \
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[]) \
       AS w(meter, window_start, window_end, amount, lim, unit)), \
     booked AS ( \
       INSERT INTO meters AS m (meter, window_start, window_end, held, used) \
       SELECT meter, window_start, window_end, \
              CASE WHEN unit = 'requests' THEN 0 ELSE amount END, \
              CASE WHEN unit = 'requests' THEN amount ELSE 0 END \
       FROM wanted ORDER BY meter, window_start \
       ON CONFLICT (meter, window_start) DO UPDATE \
       SET held = m.held + excluded.held, used = m.used + excluded.used \
       WHERE m.held + m.used + excluded.held + excluded.used \
             <= (SELECT w.lim FROM wanted w WHERE w.meter = m.meter AND w.window_start = m.window_start) \
       RETURNING m.meter, m.window_start), \
     held AS ( \
       INSERT INTO holds (attempt_id, meter, window_start, unit, amount) \
       SELECT $7, w.meter, w.window_start, w.unit, w.amount \
       FROM wanted w JOIN booked b USING (meter, window_start) \
       WHERE w.unit <> 'requests') \
     SELECT meter, window_start FROM booked";
