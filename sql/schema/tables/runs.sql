-- Table runs: one row per night (a refresh) stored in the catalogue.
-- Key: run_id. The version columns say what code and data the night ran with. A failed or
-- empty night is recorded too, but only a completed or partial night that listed repos is ever
-- the latest (the view latest_run).
CREATE TABLE IF NOT EXISTS runs (
    run_id               VARCHAR PRIMARY KEY,
    started              TIMESTAMPTZ NOT NULL,
    ended                TIMESTAMPTZ NOT NULL,
    status               run_status NOT NULL,
    source               run_source NOT NULL,
    speccat_version      VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,
    torch_version        VARCHAR NOT NULL,
    census_version       VARCHAR NOT NULL,
    records_version      VARCHAR NOT NULL,
    profiles_version     VARCHAR NOT NULL,
    settings_version     VARCHAR NOT NULL,
    n_repos              INTEGER NOT NULL,  -- repos listed this night
    n_configs            INTEGER NOT NULL,  -- distinct configs among them
    n_specs              INTEGER NOT NULL,  -- specs censused this night (carried ones not counted)
    n_failures           INTEGER NOT NULL,
    reason               reason,            -- why a failed night failed (its listing's reason); NULL otherwise
    message              VARCHAR            -- that failure's one-line message
);
