-- Table op_prices: the memory curve, op by op: what one layer of a kind keeps for each op and
-- part of the records (catalogue/records/records.yaml), per rank and micro-batch, with nothing
-- recomputed, at each setting of settings.yaml's `curve` (sequence lengths beyond the grid's,
-- at tp 1 and 8, each stack) where every kind can be laid out, beside the layer's bytes under
-- full recompute. A switch set keeps the ops switch_kept lists for it: its bytes are the sum of
-- their rows (catalogue/records/opsplit.py checks that sum against its price). Every kind has a
-- row for every (part, op) of the records at each setting, 0 where none of its slots holds it.
-- Key: (config_hash, census_version, transformers_version, torch_version, records_version, kind, setting_id, part, op).
CREATE TABLE IF NOT EXISTS op_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    records_version VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    part            VARCHAR NOT NULL,  -- the layer's part the bytes are in: attention, ffn or norm
    op              VARCHAR NOT NULL,  -- an op or part of the records
    kept_bytes      DOUBLE NOT NULL,   -- its share of the layer's bytes, nothing recomputed
    full_bytes      DOUBLE NOT NULL,   -- the layer's bytes under full recompute (the same on each row of a kind and setting)
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, records_version, kind, setting_id, part, op)
);
