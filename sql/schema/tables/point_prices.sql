-- Table point_prices: the records' bytes per token of one layer of a kind, with no recompute
-- but what the point names, at each setting the census measured the kind at (the `point`s of
-- the table measured): the census's own, a second sequence length, context- and
-- tensor-parallel ranks, switch sets recomputed (catalogue/records/points.py). Priced from the
-- spec's dimensions and stated facts, never from the measured bytes; with the FLOPs of the
-- layer's forward at the same setting as costs.yaml prices them, and the working set of its backward. Key: (config_hash,
-- census_version, transformers_version, torch_version, records_version, kind, point).
CREATE TABLE IF NOT EXISTS point_prices (
    config_hash      VARCHAR NOT NULL,
    census_version   VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    records_version  VARCHAR NOT NULL,
    kind             VARCHAR NOT NULL,
    point            VARCHAR NOT NULL,
    priced_per_token DOUBLE NOT NULL,  -- bytes per token of the setting's sequence
    forward_flops    DOUBLE,           -- FLOPs of one layer's forward, one sequence (costs.yaml, full recompute;
                                       -- NULL in rows stored before it was priced)
    backward_peak_per_token DOUBLE,    -- the working set of one layer's backward, per token (records.yaml
                                       -- working_set; NULL where the spec states none or before it was priced)
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, records_version, kind, point)
);
