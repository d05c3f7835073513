-- Hedging: a route may let a job have more than one attempt open at once
-- (its `hedge`, see src/engine/hedge.rs), up to a bound the job carries
-- from its route from the moment it is created. Side by side with
-- migrations/sqlite/0006_hedged_attempts.sql.
--
-- R4 becomes: at most `open_attempts` attempts of a job are `starting` or
-- `unknown`. Each open attempt holds a lane, 1 … `open_attempts`, and a lane
-- holds at most one open attempt (the unique index), so the bound holds
-- whoever inserts — a racing driver, an operator, a hand-written INSERT. A
-- job created without a hedge has one lane: the old rule, unchanged.
ALTER TABLE jobs ADD COLUMN open_attempts INTEGER NOT NULL DEFAULT 1
    CHECK (open_attempts BETWEEN 1 AND 3);
ALTER TABLE attempts ADD COLUMN lane INTEGER NOT NULL DEFAULT 1
    CHECK (lane BETWEEN 1 AND 3);

DROP INDEX attempts_one_open_per_job;
CREATE UNIQUE INDEX attempts_one_open_per_lane ON attempts (job_id, lane)
    WHERE state IN ('starting', 'unknown');

-- Lane 1 is every job's; the function runs only for a hedged attempt. Here
-- a WHEN costs less than the plpgsql call it saves (unlike 0005's UPDATE
-- trigger): measured with pgbench, one prepared INSERT per transaction,
-- 0.247–0.249 ms with the WHEN, 0.26–0.31 ms with none, 0.27–0.31 ms
-- calling the function for every row; a 20,000-row INSERT took 0.36–0.54 s
-- with the WHEN, 0.38–0.52 s with none, 0.77–0.80 s calling it.
CREATE FUNCTION attempts_lane_within_bound() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lane > (SELECT open_attempts FROM jobs WHERE id = NEW.job_id) THEN
        RAISE EXCEPTION 'more open attempts than the job''s open_attempts'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_lane_within_bound BEFORE INSERT ON attempts
    FOR EACH ROW WHEN (NEW.lane > 1) EXECUTE FUNCTION attempts_lane_within_bound();

-- Neither number moves once written, or the bound could be walked around.
-- `UPDATE OF` fires only for a statement that sets the column, which the
-- gateway never does.
CREATE FUNCTION attempts_lane_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.lane IS DISTINCT FROM OLD.lane THEN
        RAISE EXCEPTION 'an attempt''s lane never changes' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE FUNCTION jobs_open_attempts_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.open_attempts IS DISTINCT FROM OLD.open_attempts THEN
        RAISE EXCEPTION 'a job''s open_attempts never changes' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_lane_immutable BEFORE UPDATE OF lane ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_lane_immutable();
CREATE TRIGGER jobs_open_attempts_immutable BEFORE UPDATE OF open_attempts ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_open_attempts_immutable();

-- When an attempt became `unknown`, so that its timeline can show the
-- moment the gateway stopped knowing (and how long it stayed so); set by
-- the UPDATE that makes it `unknown`, never by anything else.
ALTER TABLE attempts ADD COLUMN unknown_at BIGINT CHECK (unknown_at IS NULL OR state <> 'starting');
