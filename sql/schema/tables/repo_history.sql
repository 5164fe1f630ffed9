-- Table repo_history: one row per repo and night, what the source said that night.
-- Key: (repo_id, run_id). NULL where the source said nothing (snapshot rows have no sha,
-- downloads or likes); config_hash is NULL when the fetch failed.
CREATE TABLE IF NOT EXISTS repo_history (
    repo_id       VARCHAR NOT NULL,
    run_id        VARCHAR NOT NULL,
    sha           VARCHAR,
    last_modified TIMESTAMPTZ,
    downloads     BIGINT,
    likes         BIGINT,
    gated         gating,
    license       VARCHAR,
    pipeline_tag  VARCHAR,
    config_hash   VARCHAR,
    PRIMARY KEY (repo_id, run_id)
);
