-- Spend attributed to keys, teams and tags, and the budgets and rate limits
-- managed at runtime. Side by side with
-- migrations/postgres/0008_spend_attribution_and_limits.sql.
--
-- A job records, besides its owner, the stored key that created it, that
-- key's team and the caller's tags (a JSON array of distinct strings,
-- sorted; NULL: none). They say whom the job's spend counts against, are
-- not part of its intent, and never change.
ALTER TABLE jobs ADD COLUMN key_id BLOB CHECK (key_id IS NULL OR length(key_id) = 16);
ALTER TABLE jobs ADD COLUMN team   TEXT CHECK (team IS NULL OR length(team) BETWEEN 1 AND 255);
ALTER TABLE jobs ADD COLUMN tags   TEXT CHECK (tags IS NULL OR json_valid(tags));

CREATE TRIGGER jobs_attribution_immutable BEFORE UPDATE OF key_id, team, tags ON jobs
WHEN NEW.key_id IS NOT OLD.key_id OR NEW.team IS NOT OLD.team OR NEW.tags IS NOT OLD.tags
BEGIN
    SELECT RAISE(ABORT, 'a job''s attribution is immutable');
END;

-- The spend report reads settled attempts by when they settled.
CREATE INDEX attempts_settled_at ON attempts (finished_at) WHERE cost_nanos IS NOT NULL;

-- A budget or rate limit on one key, team, tag or owner (`subject`),
-- optionally on one route. `amount` is nano-units of the currency for a
-- budget over `period` (`1h`, `1d`, `30d`, `month`), and requests or tokens
-- for a rate limit over `1m`. A removed limit stays (its audit names it).
CREATE TABLE spend_limits (
    id          BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    scope       TEXT    NOT NULL CHECK (scope IN ('key', 'team', 'tag', 'owner')),
    subject     TEXT    NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    route       TEXT    CHECK (route IS NULL OR length(route) BETWEEN 1 AND 255),
    kind        TEXT    NOT NULL CHECK (kind IN ('budget', 'requests', 'tokens')),
    amount      INTEGER NOT NULL CHECK (amount >= 0),
    period      TEXT    NOT NULL CHECK (period IN ('1m', '1h', '1d', '30d', 'month')),
    created_at  INTEGER NOT NULL,
    created_by  TEXT    NOT NULL CHECK (length(created_by) BETWEEN 1 AND 255),
    removed_at  INTEGER,
    version     INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    CHECK ((kind = 'budget') = (period <> '1m')),
    CHECK (removed_at IS NULL OR removed_at >= created_at)
) STRICT;

-- What a limit applies to never changes (a new subject is a new limit); a
-- removal is never undone; every change names the version it read.
CREATE TRIGGER spend_limits_guard BEFORE UPDATE ON spend_limits
WHEN NEW.id IS NOT OLD.id OR NEW.scope IS NOT OLD.scope OR NEW.subject IS NOT OLD.subject
    OR NEW.route IS NOT OLD.route OR NEW.kind IS NOT OLD.kind OR NEW.period IS NOT OLD.period
    OR NEW.created_at IS NOT OLD.created_at OR NEW.created_by IS NOT OLD.created_by
    OR (OLD.removed_at IS NOT NULL) OR NEW.version IS NOT OLD.version + 1
BEGIN
    SELECT RAISE(ABORT, 'a spend limit''s subject is immutable and a removed limit stays removed');
END;

CREATE TRIGGER spend_limits_never_deleted BEFORE DELETE ON spend_limits
BEGIN
    SELECT RAISE(ABORT, 'a spend limit is removed, never deleted');
END;

-- Every change to a limit, in the transaction that makes it; `seq` only
-- grows, so a replica that remembers the last one it saw knows whether to
-- read the limits again.
CREATE TABLE limit_audit (
    seq      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    actor    TEXT    NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    action   TEXT    NOT NULL CHECK (action IN ('create', 'update', 'remove')),
    limit_id BLOB    NOT NULL REFERENCES spend_limits (id),
    changes  TEXT    NOT NULL
) STRICT;

CREATE TRIGGER limit_audit_no_update BEFORE UPDATE ON limit_audit
BEGIN
    SELECT RAISE(ABORT, 'the limit audit is append-only');
END;
CREATE TRIGGER limit_audit_no_delete BEFORE DELETE ON limit_audit
BEGIN
    SELECT RAISE(ABORT, 'the limit audit is append-only');
END;
