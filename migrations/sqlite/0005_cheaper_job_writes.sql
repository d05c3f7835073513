-- Fewer indexes written per job, the same invariants. Side by side with
-- migrations/postgres/0005_cheaper_job_writes_and_settle_notify.sql (which
-- also announces settled jobs to other replicas; SQLite has one process).
--
-- `jobs_status` (all statuses, low selectivity) served only the recovery
-- sweep; its two questions get partial indexes holding only the rows they
-- ask about, and a completed job (no lease, `succeeded`) is in neither.
DROP INDEX jobs_status;
DROP INDEX jobs_lease;

-- `sql::EXPIRED_LEASES`: leases that may expire (any status: a cancelled
-- job may still hold its dead driver's lease) and jobs still to be driven
-- with no lease at all (the second arm reads the NULL keys).
CREATE INDEX jobs_lease ON jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL OR status IN ('pending', 'running');

-- `sql::STRANDED_UNKNOWN`: the few jobs waiting on an unknown attempt.
CREATE INDEX jobs_unknown ON jobs (id) WHERE status = 'unknown';
