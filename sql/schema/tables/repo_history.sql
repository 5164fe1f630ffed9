-- Table repo_history: one row per repo and night, what the source said that night.
-- Key: (repo_id, run_id). NULL where the source said nothing (snapshot rows have no sha,
-- downloads or likes); config_hash is NULL when the fetch failed. The Hub's parameter counts
-- come with its listing (NULL: a snapshot night, a repo without safetensors weights, a night
-- stored before they were); config_parts with the fetched config (NULL: not fetched tonight,
-- [] when it has none), and neither is in the config_hash.
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
    hub_params          BIGINT,                -- the Hub's count of the safetensors weights' parameters (its `safetensors.total`)
    hub_params_by_dtype MAP(VARCHAR, BIGINT),  -- the same per stored dtype (its `safetensors.parameters`): BF16, F8_E4M3, I32, ...
    config_parts        VARCHAR[],             -- the config's parts its language model leaves out (vision_config, quantization_config, ...)
    PRIMARY KEY (repo_id, run_id)
);
