-- Table infeasible_settings: one row per (config, census version, records version, setting,
-- kind) where that kind cannot be laid out (catalogue/records/layouts.yaml): heads or kv heads
-- tp cannot split, a sequence its sharding cannot split. The config has no price at such a
-- setting (layer_prices, full_prices): each setting of a priced config is either priced for
-- every kind or has at least one row here. Key: (config_hash, census_version, transformers_version, torch_version,
-- records_version, setting_id, kind).
CREATE TABLE IF NOT EXISTS infeasible_settings (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    records_version VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    rule            VARCHAR NOT NULL,  -- the rule of layouts.yaml that refuses it
    message         VARCHAR NOT NULL,  -- why, with the numbers
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, records_version, setting_id, kind)
);
