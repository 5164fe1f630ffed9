-- Table layer_prices: the bytes one layer of a kind keeps for its backward pass, per rank and
-- micro-batch, at one setting under one switch set, as the records price it.
-- Key: (config_hash, census_version, transformers_version, torch_version, kind, setting_id, mask, records_version), checked by
-- sql/steps/checks.sql rather than declared: an index over millions of price rows doubled the
-- file (measured: 559 vs 274 MiB at 1,000 configs) and buys nothing a publish-time check does not.
CREATE TABLE IF NOT EXISTS layer_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    mask            SMALLINT NOT NULL,
    records_version VARCHAR NOT NULL,
    attention       DOUBLE NOT NULL,
    ffn             DOUBLE NOT NULL,
    norm            DOUBLE NOT NULL,
    total           DOUBLE NOT NULL
);
