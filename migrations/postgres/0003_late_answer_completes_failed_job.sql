-- A late answer may complete a job that failed meanwhile (its chain ran out
-- while one of its attempts was `unknown` or `abandoned`): the work was done
-- and paid for, so it is the job's result — `failed → succeeded`, the only
-- edge out of `failed` besides a new attempt started by hand. The rest of
-- the state machine is unchanged; see src/jobs/transitions.rs.
CREATE OR REPLACE FUNCTION jobs_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'pending' AND NEW.status IN ('running', 'failed', 'cancelled'))
        OR (OLD.status = 'running' AND NEW.status IN ('succeeded', 'failed', 'unknown', 'cancelled'))
        OR (OLD.status = 'unknown' AND NEW.status IN ('running', 'succeeded', 'failed', 'cancelled'))
        OR (OLD.status = 'failed'  AND NEW.status IN ('running', 'succeeded')))
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
