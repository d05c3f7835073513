-- A third role for stored keys, `team_admin`: it manages the user keys of
-- its own team and reads its team's spend, so it has a team; and a key's
-- team, part of its spend's attribution, never changes. Side by side with
-- migrations/sqlite/0011_team_admin_keys.sql.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('user', 'admin', 'team_admin'));
ALTER TABLE api_keys ADD CONSTRAINT api_keys_team_admin_has_team CHECK (role <> 'team_admin' OR team IS NOT NULL);

CREATE OR REPLACE FUNCTION api_keys_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.key_hash <> OLD.key_hash OR NEW.prefix <> OLD.prefix
        OR NEW.owner_id <> OLD.owner_id OR NEW.role <> OLD.role
        OR NEW.team IS DISTINCT FROM OLD.team
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
