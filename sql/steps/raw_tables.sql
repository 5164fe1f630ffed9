-- The inputs of sql/steps/derive.sql, created in `incoming` and filled from Arrow: the JSON
-- documents of tonight's new configs and specs, as text.
CREATE TABLE raw_configs (
    config_hash VARCHAR PRIMARY KEY,
    config      VARCHAR NOT NULL
);
CREATE TABLE raw_specs (
    config_hash          VARCHAR,
    census_version       VARCHAR,
    transformers_version VARCHAR,
    torch_version        VARCHAR,
    spec                 VARCHAR NOT NULL,
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version)
);
