-- A late answer may complete a job that failed meanwhile (its chain ran out
-- while one of its attempts was `unknown` or `abandoned`): the work was done
-- and paid for, so it is the job's result — `failed → succeeded`, the only
-- edge out of `failed` besides a new attempt started by hand. The rest of
-- the state machine is unchanged; see src/jobs/transitions.rs.
DROP TRIGGER jobs_status_transition;

CREATE TRIGGER jobs_status_transition BEFORE UPDATE OF status ON jobs
WHEN NEW.status <> OLD.status AND NOT (
       (OLD.status = 'pending' AND NEW.status IN ('running', 'failed', 'cancelled'))
    OR (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed', 'unknown', 'cancelled'))
    OR (OLD.status = 'unknown' AND NEW.status IN ('running', 'succeeded', 'failed', 'cancelled'))
    OR (OLD.status = 'failed'  AND NEW.status IN ('running', 'succeeded')))
BEGIN
    SELECT RAISE(ABORT, 'illegal job status transition');
END;
