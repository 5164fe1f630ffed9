-- Table switch_costs: what re-running a switch set's ops costs for one layer of a kind, per rank
-- and micro-batch, at one setting, and where the set stands among all sets, as the records and
-- costs.yaml price it (catalogue/records/switchcosts.py). One row per row of layer_prices (the
-- same key) plus one per full_prices row with mask = -1: full recompute, the layer's forward.
-- Key: (config_hash, census_version, transformers_version, torch_version, kind, setting_id, mask, records_version), checked by
-- sql/steps/checks.sql like layer_prices (see layer_prices.sql for why not declared).
CREATE TABLE IF NOT EXISTS switch_costs (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    mask            SMALLINT NOT NULL,  -- a switch_sets mask, or -1 for full recompute
    records_version VARCHAR NOT NULL,
    recompute_flops DOUBLE NOT NULL,    -- forward FLOPs of the ops the set re-runs (FlopCounterMode's count)
    recompute_bytes DOUBLE NOT NULL,    -- bytes those element-wise ops read and write
    step_flops      DOUBLE NOT NULL,    -- the layer's forward + backward FLOPs (costs.yaml step_factor forwards)
    representative  SMALLINT NOT NULL,  -- the lowest mask with the same bytes in every part and the same costs
    on_frontier     BOOLEAN NOT NULL    -- no other point (mask or full recompute) keeps no more bytes at no
                                        -- more FLOPs and bytes moved, and less of one
);
