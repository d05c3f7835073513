-- Hedging: a route may let a job have more than one attempt open at once
-- (its `hedge`, see src/engine/hedge.rs), up to a bound the job carries
-- from its route from the moment it is created. Side by side with
-- migrations/postgres/0006_hedged_attempts.sql.
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

-- Lane 1 is every job's; the look-up runs only for a hedged attempt.
CREATE TRIGGER attempts_lane_within_bound BEFORE INSERT ON attempts
WHEN NEW.lane > 1 AND NEW.lane > (SELECT open_attempts FROM jobs WHERE id = NEW.job_id)
BEGIN
    SELECT RAISE(ABORT, 'more open attempts than the job''s open_attempts');
END;

-- Neither number moves once written, or the bound could be walked around.
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

-- When an attempt became `unknown`, so that its timeline can show the
-- moment the gateway stopped knowing (and how long it stayed so); set by
-- the UPDATE that makes it `unknown`, never by anything else.
ALTER TABLE attempts ADD COLUMN unknown_at INTEGER CHECK (unknown_at IS NULL OR state <> 'starting');
