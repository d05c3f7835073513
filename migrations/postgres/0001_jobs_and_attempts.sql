-- intentgate schema, PostgreSQL flavour. The same invariants live in
-- migrations/sqlite/0001_jobs_and_attempts.sql; keep the two side by side.
-- Timestamps are unix epoch milliseconds (BIGINT) on both backends so that
-- lease arithmetic is plain integer comparison.

CREATE TABLE jobs (
    id               UUID    NOT NULL PRIMARY KEY,
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
    version          BIGINT  NOT NULL DEFAULT 0 CHECK (version >= 0),
    completed_by     UUID,
    result           TEXT,
    error            TEXT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    -- R10: one driver per job.
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    UNIQUE (owner_id, idempotency_key),
    -- A job has a result and a winning attempt exactly when it succeeded.
    CHECK ((status = 'succeeded') = (completed_by IS NOT NULL)),
    CHECK ((status = 'succeeded') = (result IS NOT NULL)),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

CREATE TABLE attempts (
    id           UUID    NOT NULL PRIMARY KEY,
    job_id       UUID    NOT NULL REFERENCES jobs (id),
    number       INTEGER NOT NULL CHECK (number >= 1),
    provider     TEXT    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'starting'
                 CHECK (state IN ('starting', 'succeeded', 'failed', 'unknown', 'abandoned', 'superseded')),
    -- R6: the job version this attempt read when it started.
    job_version  BIGINT  NOT NULL CHECK (job_version >= 0),
    -- Outcome class reported by the provider adapter, or the contract's verdict.
    outcome      TEXT CHECK (outcome IN ('ok', 'not_sent', 'rejected', 'bad_output', 'unknown',
                                         'contract_violation')),
    detail       TEXT,
    response     TEXT,
    resolved_by  TEXT,
    started_at   BIGINT  NOT NULL,
    finished_at  BIGINT,
    UNIQUE (job_id, number),
    -- An attempt is finished exactly when it left the open states.
    CHECK ((state IN ('starting', 'unknown')) = (finished_at IS NULL))
);

ALTER TABLE jobs ADD CONSTRAINT jobs_completed_by_fkey
    FOREIGN KEY (completed_by) REFERENCES attempts (id);

-- R4, database half: at most one attempt per job is `starting` or `unknown`.
CREATE UNIQUE INDEX attempts_one_open_per_job ON attempts (job_id)
    WHERE state IN ('starting', 'unknown');

CREATE INDEX jobs_status ON jobs (status);
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX attempts_provider_unknown ON attempts (provider) WHERE state = 'unknown';

-- The state machines of src/jobs/transitions.rs, enforced by the database:
-- an UPDATE that moves a state along a pair not listed there is aborted.
CREATE FUNCTION jobs_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'pending' AND NEW.status IN ('running', 'failed', 'cancelled'))
        OR (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed', 'unknown', 'cancelled'))
        OR (OLD.status = 'unknown' AND NEW.status IN ('running', 'succeeded', 'failed', 'cancelled'))
        OR (OLD.status = 'failed'  AND NEW.status = 'running'))
    THEN
        RAISE EXCEPTION 'illegal job status transition % -> %', OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    -- R1: the intent of a job never changes, and a result once written stays.
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.owner_id IS DISTINCT FROM OLD.owner_id
       OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
       OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint OR NEW.route IS DISTINCT FROM OLD.route
       OR NEW.request IS DISTINCT FROM OLD.request OR NEW.version < OLD.version
       OR (OLD.completed_by IS NOT NULL
           AND (NEW.completed_by IS DISTINCT FROM OLD.completed_by OR NEW.result IS DISTINCT FROM OLD.result))
    THEN
        RAISE EXCEPTION 'a job''s intent and result are immutable' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_guard BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION jobs_guard();

CREATE FUNCTION attempts_state_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state <> OLD.state AND NOT (
           (OLD.state = 'starting'  AND NEW.state IN ('succeeded', 'failed', 'unknown', 'superseded'))
        OR (OLD.state = 'unknown'   AND NEW.state IN ('succeeded', 'failed', 'abandoned', 'superseded'))
        OR (OLD.state = 'abandoned' AND NEW.state IN ('succeeded', 'superseded')))
    THEN
        RAISE EXCEPTION 'illegal attempt state transition % -> %', OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_state_transition BEFORE UPDATE ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_state_transition();
