-- no-transaction
-- A third role for stored keys, `team_admin`: it manages the user keys of
-- its own team and reads its team's spend, so it has a team. Side by side
-- with migrations/postgres/0009_team_admin_keys.sql.
--
-- SQLite cannot change a CHECK in place: the table is built again under
-- its own name, filled, and put in the old one's place, with its triggers
-- created again as they were. Foreign keys are off while it is swapped
-- (`key_audit` and a rotated key's successor reference it), which needs a
-- connection outside a transaction: hence `no-transaction` above and the
-- explicit one below.
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE api_keys_rebuilt (
    id           BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    key_hash     TEXT    NOT NULL UNIQUE CHECK (length(key_hash) = 64),
    prefix       TEXT    NOT NULL CHECK (length(prefix) = 11),
    name         TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    owner_id     TEXT    NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 255),
    role         TEXT    NOT NULL CHECK (role = 'user' OR role = 'admin' OR role = 'team_admin'),
    -- The team its jobs' spend also counts against; NULL: none.
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
    CHECK (retires_at IS NULL OR retires_at >= created_at),
    -- A team admin manages a team: it has one.
    CHECK (role <> 'team_admin' OR team IS NOT NULL)
) STRICT;
INSERT INTO api_keys_rebuilt SELECT id, key_hash, prefix, name, owner_id, role, team, routes, expires_at,
    created_at, created_by, revoked_at, metadata, rotated_from, retires_at, version FROM api_keys;
DROP TABLE api_keys;
ALTER TABLE api_keys_rebuilt RENAME TO api_keys;

-- What identifies a key (its team included: its spend's attribution), and
-- who made it, never changes; a revocation or a retirement, once written,
-- is never undone.
CREATE TRIGGER api_keys_guard BEFORE UPDATE ON api_keys
WHEN NEW.id IS NOT OLD.id OR NEW.key_hash IS NOT OLD.key_hash OR NEW.prefix IS NOT OLD.prefix
    OR NEW.owner_id IS NOT OLD.owner_id OR NEW.role IS NOT OLD.role OR NEW.team IS NOT OLD.team
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
COMMIT;
PRAGMA foreign_keys = ON;
