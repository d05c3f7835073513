-- API keys managed at runtime, and the append-only audit of every change to
-- them. Side by side with migrations/sqlite/0009_api_keys.sql.
--
-- A key is stored only as the SHA-256 (hex) of its material; `prefix` is
-- the first characters of the material (`ig_` and 8 hex digits), kept so
-- that people can recognise a key in a list, and not enough to use it.
CREATE TABLE api_keys (
    id           UUID    NOT NULL PRIMARY KEY,
    key_hash     TEXT    NOT NULL UNIQUE CHECK (length(key_hash) = 64),
    prefix       TEXT    NOT NULL CHECK (length(prefix) = 11),
    name         TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    owner_id     TEXT    NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 255),
    role         TEXT    NOT NULL CHECK (role IN ('user', 'admin')),
    -- The team the key belongs to, when teams exist; NULL: none.
    team         TEXT    CHECK (length(team) BETWEEN 1 AND 255),
    -- JSON array of route names the key may use; NULL: every route.
    routes       TEXT,
    expires_at   BIGINT,
    created_at   BIGINT  NOT NULL,
    created_by   TEXT    NOT NULL CHECK (length(created_by) BETWEEN 1 AND 255),
    revoked_at   BIGINT,
    -- JSON object, the caller's own labels.
    metadata     TEXT    NOT NULL DEFAULT '{}',
    -- The key this one replaced (`POST /v1/admin/keys/{id}/rotate`).
    rotated_from UUID    UNIQUE REFERENCES api_keys (id),
    -- Set when the key is rotated: it works until then, and never after.
    retires_at   BIGINT,
    -- Bumped by every change: a change names the version it read.
    version      BIGINT  NOT NULL DEFAULT 0 CHECK (version >= 0),
    CHECK (expires_at IS NULL OR expires_at > created_at),
    CHECK (revoked_at IS NULL OR revoked_at >= created_at),
    CHECK (retires_at IS NULL OR retires_at >= created_at)
);

-- What identifies a key, and who made it, never changes; a revocation or a
-- retirement, once written, is never undone.
CREATE FUNCTION api_keys_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.key_hash <> OLD.key_hash OR NEW.prefix <> OLD.prefix
        OR NEW.owner_id <> OLD.owner_id OR NEW.role <> OLD.role
        OR NEW.created_at <> OLD.created_at OR NEW.created_by <> OLD.created_by
        OR NEW.rotated_from IS DISTINCT FROM OLD.rotated_from
        OR (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS DISTINCT FROM OLD.revoked_at)
        OR (OLD.retires_at IS NOT NULL AND NEW.retires_at IS DISTINCT FROM OLD.retires_at)
        OR NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'an API key''s identity, revocation and retirement are immutable'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER api_keys_guard BEFORE UPDATE ON api_keys FOR EACH ROW EXECUTE FUNCTION api_keys_guard();

CREATE FUNCTION api_keys_never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'an API key is revoked, never deleted' USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER api_keys_never_deleted BEFORE DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION api_keys_never_deleted();

-- Every change to a key, in the transaction that makes it: who, what,
-- which key, when, and the fields it set (never key material).
CREATE TABLE key_audit (
    seq      BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       BIGINT  NOT NULL,
    actor    TEXT    NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    action   TEXT    NOT NULL CHECK (action IN ('create', 'update', 'rotate', 'revoke')),
    key_id   UUID    NOT NULL REFERENCES api_keys (id),
    changes  TEXT    NOT NULL
);
CREATE INDEX key_audit_key ON key_audit (key_id, seq);

-- Nobody edits the audit: not an UPDATE, not a DELETE, not a TRUNCATE.
CREATE FUNCTION key_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the key audit is append-only' USING ERRCODE = 'check_violation';
END;
$$;
CREATE TRIGGER key_audit_no_update BEFORE UPDATE OR DELETE ON key_audit
    FOR EACH ROW EXECUTE FUNCTION key_audit_append_only();
CREATE TRIGGER key_audit_no_truncate BEFORE TRUNCATE ON key_audit
    FOR EACH STATEMENT EXECUTE FUNCTION key_audit_append_only();

-- Every replica LISTENs on `intentgate_key_changed` (src/store/listener.rs)
-- and drops the key named in the payload from its cache: a revocation made
-- on one replica (or by the CLI) is refused on every other at its commit.
-- Key changes are rare, so the NOTIFY's serialised commit costs nothing.
CREATE FUNCTION key_audit_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('intentgate_key_changed', NEW.key_id::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER key_audit_notify AFTER INSERT ON key_audit
    FOR EACH ROW EXECUTE FUNCTION key_audit_notify();
