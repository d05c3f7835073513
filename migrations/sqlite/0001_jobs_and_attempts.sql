-- intentgate schema, SQLite flavour. The same invariants live in
-- migrations/postgres/0001_jobs_and_attempts.sql; keep the two side by side.
-- Timestamps are unix epoch milliseconds (INTEGER) on both backends so that
-- lease arithmetic is plain integer comparison. UUIDs are 16-byte BLOBs.

CREATE TABLE jobs (
    id               BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    owner_id         TEXT    NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 255),
    -- R2: the key belongs to the owner; the UNIQUE below is the only enforcer.
    idempotency_key  TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- R3: SHA-256 (hex) of the RFC 8785 canonical request body.
    fingerprint      TEXT    NOT NULL CHECK (length(fingerprint) = 64),
    route            TEXT    NOT NULL,
    request          TEXT    NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'unknown', 'cancelled')),
    -- R6: bumped by every transition; attempts record the version they read.
    version          INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    completed_by     BLOB    REFERENCES attempts (id),
    result           TEXT,
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- R10: one driver per job.
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    UNIQUE (owner_id, idempotency_key),
    -- A job has a result and a winning attempt exactly when it succeeded.
    CHECK ((status = 'succeeded') = (completed_by IS NOT NULL)),
    CHECK ((status = 'succeeded') = (result IS NOT NULL)),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
) STRICT;

CREATE TABLE attempts (
    id           BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    job_id       BLOB    NOT NULL REFERENCES jobs (id),
    number       INTEGER NOT NULL CHECK (number >= 1),
    provider     TEXT    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'starting'
                 CHECK (state IN ('starting', 'succeeded', 'failed', 'unknown', 'abandoned', 'superseded')),
    -- R6: the job version this attempt read when it started.
    job_version  INTEGER NOT NULL CHECK (job_version >= 0),
    -- Outcome class reported by the provider adapter, or the contract's verdict.
    outcome      TEXT CHECK (outcome IN ('ok', 'not_sent', 'rejected', 'bad_output', 'unknown',
                                         'contract_violation')),
    detail       TEXT,
    response     TEXT,
    resolved_by  TEXT,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    UNIQUE (job_id, number),
    -- An attempt is finished exactly when it left the open states.
    CHECK ((state IN ('starting', 'unknown')) = (finished_at IS NULL))
) STRICT;

-- R4, database half: at most one attempt per job is `starting` or `unknown`.
CREATE UNIQUE INDEX attempts_one_open_per_job ON attempts (job_id)
    WHERE state IN ('starting', 'unknown');

CREATE INDEX jobs_status ON jobs (status);
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX attempts_provider_unknown ON attempts (provider) WHERE state = 'unknown';

-- The state machines of src/jobs/transitions.rs, enforced by the database:
-- an UPDATE that moves a state along a pair not listed there is aborted.
CREATE TRIGGER jobs_status_transition BEFORE UPDATE OF status ON jobs
WHEN NEW.status <> OLD.status AND NOT (
       (OLD.status = 'pending' AND NEW.status IN ('running', 'failed', 'cancelled'))
    OR (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed', 'unknown', 'cancelled'))
    OR (OLD.status = 'unknown' AND NEW.status IN ('running', 'succeeded', 'failed', 'cancelled'))
    OR (OLD.status = 'failed'  AND NEW.status = 'running'))
BEGIN
    SELECT RAISE(ABORT, 'illegal job status transition');
END;

CREATE TRIGGER attempts_state_transition BEFORE UPDATE OF state ON attempts
WHEN NEW.state <> OLD.state AND NOT (
       (OLD.state = 'starting'  AND NEW.state IN ('succeeded', 'failed', 'unknown', 'superseded'))
    OR (OLD.state = 'unknown'   AND NEW.state IN ('succeeded', 'failed', 'abandoned', 'superseded'))
    OR (OLD.state = 'abandoned' AND NEW.state IN ('succeeded', 'superseded')))
BEGIN
    SELECT RAISE(ABORT, 'illegal attempt state transition');
END;

-- R1: the intent of a job never changes, and a result once written stays.
CREATE TRIGGER jobs_intent_immutable BEFORE UPDATE ON jobs
WHEN NEW.id IS NOT OLD.id OR NEW.owner_id IS NOT OLD.owner_id
  OR NEW.idempotency_key IS NOT OLD.idempotency_key OR NEW.fingerprint IS NOT OLD.fingerprint
  OR NEW.route IS NOT OLD.route OR NEW.request IS NOT OLD.request OR NEW.version < OLD.version
  OR (OLD.completed_by IS NOT NULL
      AND (NEW.completed_by IS NOT OLD.completed_by OR NEW.result IS NOT OLD.result))
BEGIN
    SELECT RAISE(ABORT, 'a job''s intent and result are immutable');
END;
