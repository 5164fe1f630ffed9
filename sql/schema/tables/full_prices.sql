-- Table full_prices: the bytes one fully recomputed layer of a kind keeps (its input), per
-- rank and micro-batch, at one setting. Key: (config_hash, census_version, transformers_version, torch_version, kind, setting_id,
-- records_version), checked by sql/steps/checks.sql (see layer_prices.sql for why not declared).
CREATE TABLE IF NOT EXISTS full_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    records_version VARCHAR NOT NULL,
    kept            DOUBLE NOT NULL
);
