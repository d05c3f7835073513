-- Spend budgets and rate limits (src/budgets). SQLite's flavour is in
-- migrations/sqlite/0004_budgets_and_rate_limits.sql; keep them side by side.
--
-- An attempt reserves its worst case before it is sent (`reserved_*`, and
-- one `holds` row per meter it counts against, booked into `meters.held` in
-- the same transaction that writes it `starting`). When it leaves its open
-- states it is charged (`cost_nanos`, `tokens`): the trigger below moves
-- its reservation out of `held` and its charge into `used`, in the same
-- statement. So a meter's `used` is, by construction, the sum of the
-- charges of the settled attempts that hold it.

ALTER TABLE attempts
    ADD COLUMN reserved_nanos  BIGINT NOT NULL DEFAULT 0 CHECK (reserved_nanos >= 0),
    ADD COLUMN reserved_tokens BIGINT NOT NULL DEFAULT 0 CHECK (reserved_tokens >= 0),
    -- Money in nano-units of `[billing] currency`; NULL while the attempt is open.
    ADD COLUMN cost_nanos      BIGINT CHECK (cost_nanos >= 0),
    ADD COLUMN tokens          BIGINT CHECK (tokens >= 0),
    -- The usage the provider reported (OpenAI's `usage` object), as JSON.
    ADD COLUMN usage           TEXT;

-- Attempts settled before budgets existed cost nothing that was metered.
UPDATE attempts SET cost_nanos = 0, tokens = 0 WHERE state NOT IN ('starting', 'unknown');

-- An attempt is charged exactly when it left the open states.
ALTER TABLE attempts ADD CONSTRAINT attempts_charged_when_settled
    CHECK (state IN ('starting', 'unknown') OR (cost_nanos IS NOT NULL AND tokens IS NOT NULL));

-- One counter per meter and window.
CREATE TABLE meters (
    meter        TEXT   NOT NULL,
    window_start BIGINT NOT NULL,
    window_end   BIGINT NOT NULL CHECK (window_end > window_start),
    held         BIGINT NOT NULL DEFAULT 0 CHECK (held >= 0),
    used         BIGINT NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (meter, window_start)
);

-- What an attempt reserved on which meter.
CREATE TABLE holds (
    attempt_id   UUID   NOT NULL REFERENCES attempts (id),
    meter        TEXT   NOT NULL,
    window_start BIGINT NOT NULL,
    unit         TEXT   NOT NULL CHECK (unit IN ('nanos', 'tokens')),
    amount       BIGINT NOT NULL CHECK (amount >= 0),
    PRIMARY KEY (attempt_id, meter, window_start),
    FOREIGN KEY (meter, window_start) REFERENCES meters (meter, window_start)
);

-- Settling moves the reservation out of `held` and the charge into `used`;
-- a closed attempt charged again (an abandoned attempt's answer arriving)
-- moves the difference. Meters are updated in key order, the order in
-- which reservations lock them, so that the two cannot deadlock.
CREATE FUNCTION attempts_settle_holds() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was_open CONSTANT boolean := OLD.state IN ('starting', 'unknown');
    h record;
BEGIN
    FOR h IN SELECT meter, window_start, unit, amount FROM holds
             WHERE attempt_id = NEW.id ORDER BY meter, window_start
    LOOP
        UPDATE meters SET
            held = held - CASE WHEN was_open THEN h.amount ELSE 0 END,
            used = used + CASE h.unit
                       WHEN 'nanos' THEN NEW.cost_nanos - CASE WHEN was_open THEN 0 ELSE OLD.cost_nanos END
                       ELSE NEW.tokens - CASE WHEN was_open THEN 0 ELSE OLD.tokens END
                   END
        WHERE meter = h.meter AND window_start = h.window_start;
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER attempts_settle_holds AFTER UPDATE ON attempts FOR EACH ROW
    WHEN (NEW.state NOT IN ('starting', 'unknown')
          AND (OLD.state IN ('starting', 'unknown')
               OR NEW.cost_nanos IS DISTINCT FROM OLD.cost_nanos OR NEW.tokens IS DISTINCT FROM OLD.tokens))
    EXECUTE FUNCTION attempts_settle_holds();
