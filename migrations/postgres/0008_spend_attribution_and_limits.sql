-- Spend attributed to keys, teams and tags, and the budgets and rate limits
-- managed at runtime. Side by side with
-- migrations/sqlite/0010_spend_attribution_and_limits.sql.
--
-- A job records, besides its owner, the stored key that created it, that
-- key's team and the caller's tags (a JSON array of distinct strings,
-- sorted; NULL: none). They say whom the job's spend counts against, are
-- not part of its intent, and never change.
ALTER TABLE jobs ADD COLUMN key_id UUID;
ALTER TABLE jobs ADD COLUMN team   TEXT CHECK (team IS NULL OR length(team) BETWEEN 1 AND 255);
ALTER TABLE jobs ADD COLUMN tags   TEXT CHECK (tags IS NULL OR tags::jsonb IS NOT NULL);

CREATE FUNCTION jobs_attribution_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a job''s attribution is immutable' USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER jobs_attribution_immutable BEFORE UPDATE OF key_id, team, tags ON jobs FOR EACH ROW
    WHEN (NEW.key_id IS DISTINCT FROM OLD.key_id OR NEW.team IS DISTINCT FROM OLD.team
          OR NEW.tags IS DISTINCT FROM OLD.tags)
    EXECUTE FUNCTION jobs_attribution_immutable();

-- The spend report reads settled attempts by when they settled.
CREATE INDEX attempts_settled_at ON attempts (finished_at) WHERE cost_nanos IS NOT NULL;

-- A budget or rate limit on one key, team, tag or owner (`subject`),
-- optionally on one route. `amount` is nano-units of the currency for a
-- budget over `period` (`1h`, `1d`, `30d`, `month`), and requests or tokens
-- for a rate limit over `1m`. A removed limit stays (its audit names it).
CREATE TABLE spend_limits (
    id          UUID    NOT NULL PRIMARY KEY,
    scope       TEXT    NOT NULL CHECK (scope IN ('key', 'team', 'tag', 'owner')),
    subject     TEXT    NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    route       TEXT    CHECK (route IS NULL OR length(route) BETWEEN 1 AND 255),
    kind        TEXT    NOT NULL CHECK (kind IN ('budget', 'requests', 'tokens')),
    amount      BIGINT  NOT NULL CHECK (amount >= 0),
    period      TEXT    NOT NULL CHECK (period IN ('1m', '1h', '1d', '30d', 'month')),
    created_at  BIGINT  NOT NULL,
    created_by  TEXT    NOT NULL CHECK (length(created_by) BETWEEN 1 AND 255),
    removed_at  BIGINT,
    version     BIGINT  NOT NULL DEFAULT 0 CHECK (version >= 0),
    CHECK ((kind = 'budget') = (period <> '1m')),
    CHECK (removed_at IS NULL OR removed_at >= created_at)
);

-- What a limit applies to never changes (a new subject is a new limit); a
-- removal is never undone; every change names the version it read.
CREATE FUNCTION spend_limits_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'a spend limit is removed, never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.id <> OLD.id OR NEW.scope <> OLD.scope OR NEW.subject <> OLD.subject
        OR NEW.route IS DISTINCT FROM OLD.route OR NEW.kind <> OLD.kind OR NEW.period <> OLD.period
        OR NEW.created_at <> OLD.created_at OR NEW.created_by <> OLD.created_by
        OR OLD.removed_at IS NOT NULL OR NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'a spend limit''s subject is immutable and a removed limit stays removed'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER spend_limits_guard BEFORE UPDATE OR DELETE ON spend_limits
    FOR EACH ROW EXECUTE FUNCTION spend_limits_guard();

-- Every change to a limit, in the transaction that makes it; `seq` only
-- grows, so a replica that remembers the last one it saw knows whether to
-- read the limits again.
CREATE TABLE limit_audit (
    seq      BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       BIGINT  NOT NULL,
    actor    TEXT    NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    action   TEXT    NOT NULL CHECK (action IN ('create', 'update', 'remove')),
    limit_id UUID    NOT NULL REFERENCES spend_limits (id),
    changes  TEXT    NOT NULL
);

CREATE FUNCTION limit_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the limit audit is append-only' USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER limit_audit_no_update BEFORE UPDATE OR DELETE ON limit_audit
    FOR EACH ROW EXECUTE FUNCTION limit_audit_append_only();
CREATE TRIGGER limit_audit_no_truncate BEFORE TRUNCATE ON limit_audit
    FOR EACH STATEMENT EXECUTE FUNCTION limit_audit_append_only();
