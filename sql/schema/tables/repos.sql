-- Table repos: the latest history row of every repo ever seen (latest by its night's start),
-- refreshed from repo_history at every publish. Key: repo_id. A failed fetch at an unchanged
-- sha keeps the known config_hash.
CREATE TABLE IF NOT EXISTS repos (
    repo_id       VARCHAR PRIMARY KEY,
    sha           VARCHAR,
    last_modified TIMESTAMPTZ,
    downloads     BIGINT,
    likes         BIGINT,
    gated         gating,
    license       VARCHAR,
    pipeline_tag  VARCHAR,
    config_hash   VARCHAR
);
