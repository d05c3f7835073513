-- Whether an attempt's request has left the gateway, so that recovery can
-- tell an attempt that was never sent (failed as `not_sent` and started
-- again on the same provider) from one that may have been (made `unknown`).
--   sent NULL: not recorded (an attempt written by a release before this
--              one, say during a rolling upgrade): it may have been sent.
--   sent 0:    written with the attempt; its request has not left.
--   sent 1:    marked, and committed, before the request was handed to the
--              provider, at `sent_at`.
-- The mark only moves from 0 to 1, and only while the attempt is
-- `starting`. Side by side with migrations/postgres/0012_attempt_sent.sql.
ALTER TABLE attempts ADD COLUMN sent INTEGER CHECK (sent IS NULL OR sent = 0 OR sent = 1);
ALTER TABLE attempts ADD COLUMN sent_at INTEGER CHECK ((sent IS 1) = (sent_at IS NOT NULL));

CREATE TRIGGER attempts_sent_only_forward BEFORE UPDATE OF sent, sent_at ON attempts
WHEN (NEW.sent IS NOT OLD.sent OR NEW.sent_at IS NOT OLD.sent_at)
 AND NOT (OLD.sent IS 0 AND NEW.sent IS 1 AND OLD.state = 'starting')
BEGIN
    SELECT RAISE(ABORT, 'an attempt''s send mark only moves from not sent to sent, while it is starting');
END;
