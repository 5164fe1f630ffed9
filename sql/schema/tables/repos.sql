-- Table repos: the latest history row of every repo ever seen (latest by its night's start),
-- refreshed from repo_history at every publish. Key: repo_id. A failed fetch at an unchanged
-- sha keeps the known config_hash, and a repo not fetched tonight (unchanged in a crawl, a failed
-- fetch) the config_parts known at its sha.
CREATE TABLE IF NOT EXISTS repos (
    repo_id       VARCHAR PRIMARY KEY,
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
    config_parts        VARCHAR[]              -- the config's parts its language model leaves out (vision_config, quantization_config, ...)
);
