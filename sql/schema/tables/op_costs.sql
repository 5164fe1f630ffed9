-- Table op_costs: what re-running each op of the records costs for one layer of a kind, per rank
-- and micro-batch, at each setting the config is priced at, as catalogue/records/costs.yaml
-- prices it (docs/planning.md): its forward FLOPs (FlopCounterMode's count) and the bytes its
-- element-wise work reads and writes. A switch set re-runs the ops switch_ops lists for its
-- mask; switch_costs holds their sums, and the view rank_fits turns them into estimated
-- seconds on an accelerator (accelerators), per op the slower of compute and memory.
-- Key: (config_hash, census_version, transformers_version, torch_version, kind, setting_id, records_version, op).
CREATE TABLE IF NOT EXISTS op_costs (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    records_version VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    op              VARCHAR NOT NULL,  -- an op or part of the records (costs.yaml `ops`)
    recompute_flops DOUBLE NOT NULL,   -- its forward FLOPs
    recompute_bytes DOUBLE NOT NULL,   -- bytes its element-wise work reads and writes
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, records_version, kind, setting_id, op)
);
