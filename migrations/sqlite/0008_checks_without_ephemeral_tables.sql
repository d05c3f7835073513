-- no-transaction
-- The CHECK constraints of `jobs` and `attempts`, written so that SQLite
-- evaluates them without building a table (as migration 0007 did for the
-- triggers): a list of three or more constants after `IN` is coded as an
-- ephemeral b-tree that SQLite opens, fills and frees every time the
-- expression runs, and these CHECKs run on every insert and every state
-- change of a job and of its attempts. Measured apart, an attempt's insert
-- and settle took 20 µs with the lists and 5 µs with the comparisons.
--
-- SQLite cannot change a CHECK in place: each table is built again under
-- its own name, filled, and put in the old one's place, with its indexes
-- and triggers created again as they were. Foreign keys are off while the
-- two tables, which reference each other, are swapped (that needs a
-- connection outside a transaction: hence `no-transaction` above and the
-- explicit one below). Every rule is the same rule; only its wording
-- changed. `tests/transitions.rs` checks every transition against it.
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE jobs_rebuilt (
    id               BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    owner_id         TEXT    NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 255),
    -- R2: the key belongs to the owner; the UNIQUE below is the only enforcer.
    idempotency_key  TEXT    NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- R3: SHA-256 (hex) of the RFC 8785 canonical request body.
    fingerprint      TEXT    NOT NULL CHECK (length(fingerprint) = 64),
    route            TEXT    NOT NULL,
    request          TEXT    NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK ((status = 'pending' OR status = 'running' OR status = 'succeeded' OR status = 'failed' OR status = 'unknown' OR status = 'cancelled')),
    -- R6: bumped by every transition; attempts record the version they read.
    version          INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    completed_by     BLOB    REFERENCES attempts (id),
    result           TEXT,
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- R10: one driver per job.
    lease_owner      TEXT,
    lease_expires_at INTEGER, open_attempts INTEGER NOT NULL DEFAULT 1
    CHECK (open_attempts BETWEEN 1 AND 3),
    UNIQUE (owner_id, idempotency_key),
    -- A job has a result and a winning attempt exactly when it succeeded.
    CHECK ((status = 'succeeded') = (completed_by IS NOT NULL)),
    CHECK ((status = 'succeeded') = (result IS NOT NULL)),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
) STRICT;
INSERT INTO jobs_rebuilt SELECT * FROM jobs;

CREATE TABLE attempts_rebuilt (
    id           BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    job_id       BLOB    NOT NULL REFERENCES jobs (id),
    number       INTEGER NOT NULL CHECK (number >= 1),
    provider     TEXT    NOT NULL,
    state        TEXT    NOT NULL DEFAULT 'starting'
                 CHECK ((state = 'starting' OR state = 'succeeded' OR state = 'failed' OR state = 'unknown' OR state = 'abandoned' OR state = 'superseded')),
    -- R6: the job version this attempt read when it started.
    job_version  INTEGER NOT NULL CHECK (job_version >= 0),
    -- Outcome class reported by the provider adapter, or the contract's verdict.
    outcome      TEXT CHECK ((outcome = 'ok' OR outcome = 'not_sent' OR outcome = 'rejected' OR outcome = 'bad_output' OR outcome = 'unknown' OR outcome = 'contract_violation')),
    detail       TEXT,
    response     TEXT,
    resolved_by  TEXT,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER, reserved_nanos  INTEGER NOT NULL DEFAULT 0 CHECK (reserved_nanos >= 0), reserved_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reserved_tokens >= 0), cost_nanos      INTEGER CHECK (cost_nanos >= 0), tokens          INTEGER CHECK (tokens >= 0), usage           TEXT, lane INTEGER NOT NULL DEFAULT 1
    CHECK (lane BETWEEN 1 AND 3), unknown_at INTEGER CHECK (unknown_at IS NULL OR state <> 'starting'),
    UNIQUE (job_id, number),
    -- An attempt is finished exactly when it left the open states.
    CHECK ((state IN ('starting', 'unknown')) = (finished_at IS NULL))
) STRICT;
INSERT INTO attempts_rebuilt SELECT * FROM attempts;

DROP TABLE attempts;
DROP TABLE jobs;
ALTER TABLE jobs_rebuilt RENAME TO jobs;
ALTER TABLE attempts_rebuilt RENAME TO attempts;

CREATE UNIQUE INDEX attempts_one_open_per_lane ON attempts (job_id, lane)
    WHERE state IN ('starting', 'unknown');
CREATE INDEX attempts_provider_unknown ON attempts (provider) WHERE state = 'unknown';
CREATE INDEX jobs_lease ON jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL OR status IN ('pending', 'running');
CREATE INDEX jobs_unknown ON jobs (id) WHERE status = 'unknown';

CREATE TRIGGER jobs_intent_immutable BEFORE UPDATE ON jobs
WHEN NEW.id IS NOT OLD.id OR NEW.owner_id IS NOT OLD.owner_id
  OR NEW.idempotency_key IS NOT OLD.idempotency_key OR NEW.fingerprint IS NOT OLD.fingerprint
  OR NEW.route IS NOT OLD.route OR NEW.request IS NOT OLD.request OR NEW.version < OLD.version
  OR (OLD.completed_by IS NOT NULL
      AND (NEW.completed_by IS NOT OLD.completed_by OR NEW.result IS NOT OLD.result))
BEGIN
    SELECT RAISE(ABORT, 'a job''s intent and result are immutable');
END;

CREATE TRIGGER attempts_charged_when_settled BEFORE UPDATE OF state ON attempts
WHEN NEW.state NOT IN ('starting', 'unknown') AND (NEW.cost_nanos IS NULL OR NEW.tokens IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'a settled attempt needs its charge (cost_nanos, tokens)');
END;

CREATE TRIGGER attempts_lane_within_bound BEFORE INSERT ON attempts
WHEN NEW.lane > 1 AND NEW.lane > (SELECT open_attempts FROM jobs WHERE id = NEW.job_id)
BEGIN
    SELECT RAISE(ABORT, 'more open attempts than the job''s open_attempts');
END;

CREATE TRIGGER attempts_lane_immutable BEFORE UPDATE OF lane ON attempts
WHEN NEW.lane IS NOT OLD.lane
BEGIN
    SELECT RAISE(ABORT, 'an attempt''s lane never changes');
END;

CREATE TRIGGER jobs_open_attempts_immutable BEFORE UPDATE OF open_attempts ON jobs
WHEN NEW.open_attempts IS NOT OLD.open_attempts
BEGIN
    SELECT RAISE(ABORT, 'a job''s open_attempts never changes');
END;

CREATE TRIGGER jobs_status_transition BEFORE UPDATE OF status ON jobs
WHEN NEW.status <> OLD.status AND NOT (
       (OLD.status = 'pending'
        AND (NEW.status = 'running' OR NEW.status = 'failed' OR NEW.status = 'cancelled'))
    OR (OLD.status = 'running'
        AND (NEW.status = 'succeeded' OR NEW.status = 'failed' OR NEW.status = 'unknown'
             OR NEW.status = 'cancelled'))
    OR (OLD.status = 'unknown'
        AND (NEW.status = 'running' OR NEW.status = 'succeeded' OR NEW.status = 'failed'
             OR NEW.status = 'cancelled'))
    OR (OLD.status = 'failed' AND (NEW.status = 'running' OR NEW.status = 'succeeded')))
BEGIN
    SELECT RAISE(ABORT, 'illegal job status transition');
END;

CREATE TRIGGER attempts_state_transition BEFORE UPDATE OF state ON attempts
WHEN NEW.state <> OLD.state AND NOT (
       (OLD.state = 'starting'
        AND (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'unknown'
             OR NEW.state = 'superseded'))
    OR (OLD.state = 'unknown'
        AND (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'abandoned'
             OR NEW.state = 'superseded'))
    OR (OLD.state = 'abandoned' AND (NEW.state = 'succeeded' OR NEW.state = 'superseded')))
BEGIN
    SELECT RAISE(ABORT, 'illegal attempt state transition');
END;

CREATE TRIGGER attempts_settle_holds AFTER UPDATE ON attempts
WHEN NEW.state NOT IN ('starting', 'unknown')
 AND (OLD.state IN ('starting', 'unknown')
      OR NEW.cost_nanos IS NOT OLD.cost_nanos OR NEW.tokens IS NOT OLD.tokens)
 AND EXISTS (SELECT 1 FROM holds WHERE attempt_id = NEW.id)
BEGIN
    UPDATE meters SET
        held = held - (SELECT CASE WHEN OLD.state IN ('starting', 'unknown') THEN h.amount ELSE 0 END
                       FROM holds h WHERE h.attempt_id = NEW.id
                        AND h.meter = meters.meter AND h.window_start = meters.window_start),
        used = used + (SELECT CASE h.unit
                           WHEN 'nanos' THEN NEW.cost_nanos
                               - CASE WHEN OLD.state IN ('starting', 'unknown') THEN 0 ELSE OLD.cost_nanos END
                           ELSE NEW.tokens
                               - CASE WHEN OLD.state IN ('starting', 'unknown') THEN 0 ELSE OLD.tokens END
                       END
                       FROM holds h WHERE h.attempt_id = NEW.id
                        AND h.meter = meters.meter AND h.window_start = meters.window_start)
    WHERE (meter, window_start) IN (SELECT meter, window_start FROM holds WHERE attempt_id = NEW.id);
END;

COMMIT;
PRAGMA foreign_keys = ON;
