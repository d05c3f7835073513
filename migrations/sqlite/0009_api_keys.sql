-- API keys managed at runtime, and the append-only audit of every change to
-- them. Side by side with migrations/postgres/0007_api_keys.sql.
--
-- A key is stored only as the SHA-256 (hex) of its material; `prefix` is
-- the first characters of the material (`ig_` and 8 hex digits), kept so
-- that people can recognise a key in a list, and not enough to use it.
CREATE TABLE api_keys (
    id           BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    key_hash     TEXT    NOT NULL UNIQUE CHECK (length(key_hash) = 64),
    prefix       TEXT    NOT NULL CHECK (length(prefix) = 11),
    name         TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    owner_id     TEXT    NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 255),
    role         TEXT    NOT NULL CHECK (role = 'user' OR role = 'admin'),
    -- The team the key belongs to, when teams exist; NULL: none.
    team         TEXT    CHECK (length(team) BETWEEN 1 AND 255),
    -- JSON array of route names the key may use; NULL: every route.
    routes       TEXT,
    expires_at   INTEGER,
    created_at   INTEGER NOT NULL,
    created_by   TEXT    NOT NULL CHECK (length(created_by) BETWEEN 1 AND 255),
    revoked_at   INTEGER,
    -- JSON object, the caller's own labels.
    metadata     TEXT    NOT NULL DEFAULT '{}',
    -- The key this one replaced (`POST /v1/admin/keys/{id}/rotate`).
    rotated_from BLOB    UNIQUE REFERENCES api_keys (id),
    -- Set when the key is rotated: it works until then, and never after.
    retires_at   INTEGER,
    -- Bumped by every change: a change names the version it read.
    version      INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    CHECK (expires_at IS NULL OR expires_at > created_at),
    CHECK (revoked_at IS NULL OR revoked_at >= created_at),
    CHECK (retires_at IS NULL OR retires_at >= created_at)
) STRICT;

-- What identifies a key, and who made it, never changes; a revocation or a
-- retirement, once written, is never undone.
CREATE TRIGGER api_keys_guard BEFORE UPDATE ON api_keys
WHEN NEW.id IS NOT OLD.id OR NEW.key_hash IS NOT OLD.key_hash OR NEW.prefix IS NOT OLD.prefix
    OR NEW.owner_id IS NOT OLD.owner_id OR NEW.role IS NOT OLD.role
    OR NEW.created_at IS NOT OLD.created_at OR NEW.created_by IS NOT OLD.created_by
    OR NEW.rotated_from IS NOT OLD.rotated_from
    OR (OLD.revoked_at IS NOT NULL AND NEW.revoked_at IS NOT OLD.revoked_at)
    OR (OLD.retires_at IS NOT NULL AND NEW.retires_at IS NOT OLD.retires_at)
    OR NEW.version IS NOT OLD.version + 1
BEGIN
    SELECT RAISE(ABORT, 'an API key''s identity, revocation and retirement are immutable');
END;

CREATE TRIGGER api_keys_never_deleted BEFORE DELETE ON api_keys
BEGIN
    SELECT RAISE(ABORT, 'an API key is revoked, never deleted');
END;

-- Every change to a key, in the transaction that makes it: who, what,
-- which key, when, and the fields it set (never key material). `seq` only
-- grows (AUTOINCREMENT never reuses one) and the one writer commits in its
-- order, so a reader that remembers the last `seq` it saw finds every later
-- change: the gateway's cache polls it (src/auth/feed.rs), which also
-- sees changes the CLI made from another process.
CREATE TABLE key_audit (
    seq      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    actor    TEXT    NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    action   TEXT    NOT NULL
             CHECK (action = 'create' OR action = 'update' OR action = 'rotate' OR action = 'revoke'),
    key_id   BLOB    NOT NULL REFERENCES api_keys (id),
    changes  TEXT    NOT NULL
) STRICT;
CREATE INDEX key_audit_key ON key_audit (key_id, seq);

-- Nobody edits the audit.
CREATE TRIGGER key_audit_no_update BEFORE UPDATE ON key_audit
BEGIN
    SELECT RAISE(ABORT, 'the key audit is append-only');
END;
CREATE TRIGGER key_audit_no_delete BEFORE DELETE ON key_audit
BEGIN
    SELECT RAISE(ABORT, 'the key audit is append-only');
END;
