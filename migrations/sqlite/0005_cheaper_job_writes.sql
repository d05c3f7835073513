-- Fewer indexes written per job, the same invariants. Side by side with
-- migrations/postgres/0005_cheaper_job_writes_and_settle_notify.sql (which
-- also announces settled jobs to other replicas; SQLite has one process).
--
-- `jobs_status` (every row, low selectivity) served only the recovery
-- sweep, and `jobs_lease` held every leased row. They become partial
-- indexes holding only the jobs the sweep may have to act on; a completed
-- job (no lease, `succeeded`) is in neither. Two, not PostgreSQL's one:
-- SQLite uses a partial index only when the query's terms imply its WHERE
-- term by term, and `status = 'unknown'` does not imply an IN list.
-- Checked with EXPLAIN QUERY PLAN (bound parameters, as the gateway runs
-- them): both sweep queries search these indexes, neither scans `jobs`.
DROP INDEX jobs_status;
DROP INDEX jobs_lease;

-- `sql::EXPIRED_LEASES`: leases that may expire (any status: a cancelled
-- job may still hold its dead driver's lease) and jobs still to be driven
-- with no lease at all (the second arm reads the NULL keys).
CREATE INDEX jobs_lease ON jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL OR status IN ('pending', 'running');

-- `sql::STRANDED_UNKNOWN`: the few jobs waiting on an unknown attempt.
CREATE INDEX jobs_unknown ON jobs (id) WHERE status = 'unknown';
