-- Whether an attempt's request has left the gateway, so that recovery can
-- tell an attempt that was never sent (failed as `not_sent` and started
-- again on the same provider) from one that may have been (made `unknown`).
--   sent NULL:  not recorded (an attempt written by a release before this
--               one, say during a rolling upgrade): it may have been sent.
--   sent FALSE: written with the attempt; its request has not left.
--   sent TRUE:  marked, and committed, before the request was handed to the
--               provider, at `sent_at`.
-- The mark only moves from FALSE to TRUE, and only while the attempt is
-- `starting`. Side by side with migrations/sqlite/0014_attempt_sent.sql.
ALTER TABLE attempts ADD COLUMN sent BOOLEAN;
ALTER TABLE attempts ADD COLUMN sent_at BIGINT;
ALTER TABLE attempts ADD CONSTRAINT attempts_sent_at_when_sent CHECK ((sent IS TRUE) = (sent_at IS NOT NULL));

CREATE FUNCTION attempts_sent_only_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (OLD.sent IS FALSE AND NEW.sent IS TRUE AND OLD.state = 'starting') THEN
        RAISE EXCEPTION 'an attempt''s send mark only moves from not sent to sent, while it is starting'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_sent_only_forward BEFORE UPDATE OF sent, sent_at ON attempts
FOR EACH ROW WHEN (NEW.sent IS DISTINCT FROM OLD.sent OR NEW.sent_at IS DISTINCT FROM OLD.sent_at)
EXECUTE FUNCTION attempts_sent_only_forward();
