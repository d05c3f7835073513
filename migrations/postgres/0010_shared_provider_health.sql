-- Provider health shared between replicas (src/engine/health.rs): each
-- provider's circuit as the last replica to change it left it. A replica
-- writes each change it makes (opened until a time, or closed by an
-- answer) and reads the others' every second, so a dead provider is
-- passed over by every replica once one has seen it fail, and a replica
-- that starts knows what the others know.
CREATE TABLE provider_circuits (
    provider    TEXT    NOT NULL PRIMARY KEY,
    -- Passed over until then; NULL once an answer closed the circuit.
    open_until  BIGINT,
    -- Signs of trouble in a row when it opened.
    failures    BIGINT  NOT NULL CHECK (failures >= 0),
    changed_at  BIGINT  NOT NULL,
    -- The replica (`[engine] instance_id`) that made the change.
    changed_by  TEXT    NOT NULL
);

CREATE INDEX provider_circuits_changed ON provider_circuits (changed_at);
