-- Less work inside PostgreSQL per job, the same invariants; and a NOTIFY
-- when a job settles, so that a waiter on another replica wakes at once.
-- Side by side with migrations/sqlite/0005_cheaper_job_writes.sql.

-- Indexes on `jobs`: every one is written on every insert and on every
-- update that is not HOT. `jobs_status` (all statuses, low selectivity)
-- served only the recovery sweep; the sweep's two questions get partial
-- indexes that hold only the rows they ask about, and a job that completed
-- (no lease, `succeeded`) is in neither.
DROP INDEX jobs_status;
DROP INDEX jobs_lease;

-- `sql::EXPIRED_LEASES`: leases that may expire (any status: a cancelled
-- job may still hold its dead driver's lease) and jobs still to be driven
-- with no lease at all (the second arm reads the NULL keys).
CREATE INDEX jobs_lease ON jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL OR status IN ('pending', 'running');

-- `sql::STRANDED_UNKNOWN`: the few jobs waiting on an unknown attempt.
CREATE INDEX jobs_unknown ON jobs (id) WHERE status = 'unknown';

-- The transition and immutability guards as trigger WHEN conditions: the
-- condition is a plain expression evaluated by the executor, and the
-- plpgsql function (which names the violation) runs only for a write it
-- refuses, instead of on every UPDATE. The edges are those of
-- src/jobs/transitions.rs, as in 0003.
DROP TRIGGER jobs_guard ON jobs;

CREATE TRIGGER jobs_guard BEFORE UPDATE OF status, version, completed_by, result ON jobs FOR EACH ROW
WHEN ((NEW.status <> OLD.status AND NOT (
           (OLD.status = 'pending' AND NEW.status IN ('running', 'failed', 'cancelled'))
        OR (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed', 'unknown', 'cancelled'))
        OR (OLD.status = 'unknown' AND NEW.status IN ('running', 'succeeded', 'failed', 'cancelled'))
        OR (OLD.status = 'failed'  AND NEW.status IN ('running', 'succeeded'))))
    OR NEW.version < OLD.version
    OR (OLD.completed_by IS NOT NULL
        AND (NEW.completed_by IS DISTINCT FROM OLD.completed_by OR NEW.result IS DISTINCT FROM OLD.result)))
EXECUTE FUNCTION jobs_guard();

-- R1: no statement of the gateway names these columns in a SET; one that
-- does (and changes them) is refused. A trigger `UPDATE OF` columns fires
-- only for statements that set them, so the common writes pay nothing.
CREATE TRIGGER jobs_intent_immutable
    BEFORE UPDATE OF id, owner_id, idempotency_key, fingerprint, route, request ON jobs FOR EACH ROW
WHEN (NEW.id IS DISTINCT FROM OLD.id OR NEW.owner_id IS DISTINCT FROM OLD.owner_id
      OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
      OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint OR NEW.route IS DISTINCT FROM OLD.route
      OR NEW.request IS DISTINCT FROM OLD.request)
EXECUTE FUNCTION jobs_guard();

DROP TRIGGER attempts_state_transition ON attempts;

CREATE TRIGGER attempts_state_transition BEFORE UPDATE OF state ON attempts FOR EACH ROW
WHEN (NEW.state <> OLD.state AND NOT (
           (OLD.state = 'starting'  AND NEW.state IN ('succeeded', 'failed', 'unknown', 'superseded'))
        OR (OLD.state = 'unknown'   AND NEW.state IN ('succeeded', 'failed', 'abandoned', 'superseded'))
        OR (OLD.state = 'abandoned' AND NEW.state IN ('succeeded', 'superseded'))))
EXECUTE FUNCTION attempts_state_transition();

-- Wake-ups across replicas. A job leaving `pending`/`running` (what
-- `Prefer: wait` and a duplicate request wait for) is announced on channel
-- `intentgate_job_settled`, its id the payload, by the transaction that
-- moves it — PostgreSQL delivers it at that commit, and not at all if it
-- rolls back — when a replica other than its driver waits on it: every
-- replica LISTENs (src/store/listener.rs) and wakes its waiters on that job.
--
-- Only then: a NOTIFY serializes the commits of every transaction that
-- sends one (PostgreSQL holds a database-wide lock from before the commit
-- until after its WAL flush, to queue notifications in commit order), so
-- announcing every job would cost the group commit of concurrent jobs
-- (pgbench here: 1,650 → 400 commits/s at 16 clients). A waiter on another
-- replica first sets `awaited` (`sql::MARK_AWAITED`). That UPDATE and the
-- settling UPDATE take the same row lock, so either the settle comes after
-- it and sees `awaited` (and announces), or it came before and the waiter
-- finds the job settled when it reads it.
ALTER TABLE jobs ADD COLUMN awaited BOOLEAN NOT NULL DEFAULT false;

CREATE FUNCTION jobs_notify_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('intentgate_job_settled', NEW.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_settled AFTER UPDATE OF status ON jobs FOR EACH ROW
WHEN (NEW.awaited AND OLD.status IN ('pending', 'running') AND NEW.status NOT IN ('pending', 'running'))
EXECUTE FUNCTION jobs_notify_settled();
