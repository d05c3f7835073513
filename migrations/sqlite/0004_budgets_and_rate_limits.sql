-- Spend budgets and rate limits (src/budgets). PostgreSQL's flavour is in
-- migrations/postgres/0004_budgets_and_rate_limits.sql; keep them side by side.
--
-- An attempt reserves its worst case before it is sent (`reserved_*`, and
-- one `holds` row per meter it counts against, booked into `meters.held` in
-- the same transaction that writes it `starting`). When it leaves its open
-- states it is charged (`cost_nanos`, `tokens`): the trigger below moves
-- its reservation out of `held` and its charge into `used`, in the same
-- statement. So a meter's `used` is, by construction, the sum of the
-- charges of the settled attempts that hold it.

ALTER TABLE attempts ADD COLUMN reserved_nanos  INTEGER NOT NULL DEFAULT 0 CHECK (reserved_nanos >= 0);
ALTER TABLE attempts ADD COLUMN reserved_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reserved_tokens >= 0);
-- Money in nano-units of `[billing] currency`; NULL while the attempt is open.
ALTER TABLE attempts ADD COLUMN cost_nanos      INTEGER CHECK (cost_nanos >= 0);
ALTER TABLE attempts ADD COLUMN tokens          INTEGER CHECK (tokens >= 0);
-- The usage the provider reported (OpenAI's `usage` object), as JSON.
ALTER TABLE attempts ADD COLUMN usage           TEXT;

-- Attempts settled before budgets existed cost nothing that was metered.
UPDATE attempts SET cost_nanos = 0, tokens = 0 WHERE state NOT IN ('starting', 'unknown');

-- An attempt is charged exactly when it left the open states.
CREATE TRIGGER attempts_charged_when_settled BEFORE UPDATE OF state ON attempts
WHEN NEW.state NOT IN ('starting', 'unknown') AND (NEW.cost_nanos IS NULL OR NEW.tokens IS NULL)
BEGIN
    SELECT RAISE(ABORT, 'a settled attempt needs its charge (cost_nanos, tokens)');
END;

-- One counter per meter and window.
CREATE TABLE meters (
    meter        TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    window_end   INTEGER NOT NULL CHECK (window_end > window_start),
    held         INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
    used         INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (meter, window_start)
) WITHOUT ROWID;

-- What an attempt reserved on which meter.
CREATE TABLE holds (
    attempt_id   BLOB    NOT NULL REFERENCES attempts (id),
    meter        TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    unit         TEXT    NOT NULL CHECK (unit IN ('nanos', 'tokens')),
    amount       INTEGER NOT NULL CHECK (amount >= 0),
    PRIMARY KEY (attempt_id, meter, window_start),
    FOREIGN KEY (meter, window_start) REFERENCES meters (meter, window_start)
) WITHOUT ROWID;

-- Settling moves the reservation out of `held` and the charge into `used`;
-- a closed attempt charged again (an abandoned attempt's answer arriving)
-- moves the difference.
CREATE TRIGGER attempts_settle_holds AFTER UPDATE ON attempts
WHEN NEW.state NOT IN ('starting', 'unknown')
 AND (OLD.state IN ('starting', 'unknown')
      OR NEW.cost_nanos IS NOT OLD.cost_nanos OR NEW.tokens IS NOT OLD.tokens)
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
