-- R9: recorded contract runs, per (route, provider). Side by side with
-- migrations/sqlite/0002_contract_records.sql.

CREATE TABLE contract_runs (
    id                   UUID    NOT NULL PRIMARY KEY,
    route                TEXT    NOT NULL,
    provider             TEXT    NOT NULL,
    -- A record is current only while both fingerprints match the suite and
    -- the provider's config as they are now.
    suite_fingerprint    TEXT    NOT NULL CHECK (length(suite_fingerprint) = 64),
    provider_fingerprint TEXT    NOT NULL CHECK (length(provider_fingerprint) = 64),
    passed               BOOLEAN NOT NULL,
    started_at           BIGINT  NOT NULL,
    finished_at          BIGINT  NOT NULL CHECK (finished_at >= started_at),
    -- The whole report (JSON), for `contract status` and audits.
    report               TEXT    NOT NULL
);

CREATE INDEX contract_runs_latest ON contract_runs (route, provider, finished_at);

CREATE TABLE contract_case_results (
    run_id      UUID    NOT NULL REFERENCES contract_runs (id),
    case_name   TEXT    NOT NULL,
    passed      BOOLEAN NOT NULL,
    reasons     TEXT    NOT NULL,
    duration_ms BIGINT  NOT NULL CHECK (duration_ms >= 0),
    round_trips INTEGER NOT NULL CHECK (round_trips >= 0),
    PRIMARY KEY (run_id, case_name)
);
