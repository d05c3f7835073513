-- R9: recorded contract runs, per (route, provider). Side by side with
-- migrations/postgres/0002_contract_records.sql.

CREATE TABLE contract_runs (
    id                   BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    route                TEXT    NOT NULL,
    provider             TEXT    NOT NULL,
    -- A record is current only while both fingerprints match the suite and
    -- the provider's config as they are now.
    suite_fingerprint    TEXT    NOT NULL CHECK (length(suite_fingerprint) = 64),
    provider_fingerprint TEXT    NOT NULL CHECK (length(provider_fingerprint) = 64),
    passed               INTEGER NOT NULL CHECK (passed IN (0, 1)),
    started_at           INTEGER NOT NULL,
    finished_at          INTEGER NOT NULL CHECK (finished_at >= started_at),
    -- The whole report (JSON), for `contract status` and audits.
    report               TEXT    NOT NULL
) STRICT;

CREATE INDEX contract_runs_latest ON contract_runs (route, provider, finished_at);

CREATE TABLE contract_case_results (
    run_id      BLOB    NOT NULL REFERENCES contract_runs (id),
    case_name   TEXT    NOT NULL,
    passed      INTEGER NOT NULL CHECK (passed IN (0, 1)),
    reasons     TEXT    NOT NULL,
    duration_ms INTEGER NOT NULL CHECK (duration_ms >= 0),
    round_trips INTEGER NOT NULL CHECK (round_trips >= 0),
    PRIMARY KEY (run_id, case_name)
) STRICT;
