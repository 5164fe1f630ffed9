-- Table full_prices: the bytes one fully recomputed layer of a kind keeps (its input), per
-- rank and micro-batch, at one setting, and the working set of its backward. Key: (config_hash, census_version, transformers_version, torch_version, kind, setting_id,
-- records_version), checked by sql/steps/checks.sql (see layer_prices.sql for why not declared).
CREATE TABLE IF NOT EXISTS full_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    records_version VARCHAR NOT NULL,
    kept            DOUBLE NOT NULL,
    backward_peak   DOUBLE  -- the working set of one layer's backward with nothing recomputed: the most bytes alive beyond
                            -- those alive when it began (records.yaml working_set, catalogue/records/working.py); NULL for a
                            -- spec that states no working set (census version 17 and before) or records that price none
);
