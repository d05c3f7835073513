-- Less work inside PostgreSQL per job, the same invariants; and a NOTIFY
-- when a job settles, so that a waiter on another replica wakes at once.
-- Side by side with migrations/sqlite/0005_cheaper_job_writes.sql.

-- Indexes on `jobs`: every one is written on every insert and on every
-- update that is not HOT. `jobs_status` (every row, low selectivity) served
-- only the recovery sweep, and `jobs_lease` held every leased row. Both
-- become one partial index holding only the jobs the sweep may have to
-- act on: leased ones (any status: a cancelled job may still hold its dead
-- driver's lease), and those still to be driven or waiting on an unknown
-- attempt. A completed job (no lease, `succeeded`) leaves it.
-- `sql::EXPIRED_LEASES` reads it by `lease_expires_at` (and its NULL keys);
-- `sql::STRANDED_UNKNOWN` scans it for `status = 'unknown'` (small: the
-- jobs in flight). Checked with EXPLAIN (generic plans, as prepared).
-- (SQLite keeps two partial indexes: see its 0005.)
DROP INDEX jobs_status;
DROP INDEX jobs_lease;
CREATE INDEX jobs_lease ON jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL OR status IN ('pending', 'running', 'unknown');

-- The transition guards stay plpgsql triggers (0001, 0003). Measured: as
-- trigger WHEN conditions they cost more, not less — PostgreSQL parses and
-- prepares a WHEN condition from its stored text for every statement,
-- while plpgsql compiles its function once per connection.

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
    IF OLD.status IN ('pending', 'running') AND NEW.status NOT IN ('pending', 'running') THEN
        PERFORM pg_notify('intentgate_job_settled', NEW.id::text);
    END IF;
    RETURN NULL;
END;
$$;

-- The WHEN condition is as small as can be (it is parsed per statement):
-- an unawaited job's settle does not call the function at all.
CREATE TRIGGER jobs_notify_settled AFTER UPDATE OF status ON jobs FOR EACH ROW
WHEN (NEW.awaited)
EXECUTE FUNCTION jobs_notify_settled();
