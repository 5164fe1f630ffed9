-- Table measured: the bytes per token autograd saved for each op of one layer of a kind, as
-- the census measured them (docs/census.md), at each point: `census`, its own setting (its
-- sequence length, one rank, nothing recomputed), and the points across settings it measures
-- besides (census/across.yaml: a second sequence length, cp and tp ranks, switch sets
-- recomputed through torch's selective-checkpoint API). Bytes are per token of the point's
-- sequence (a cp rank's bytes over the whole sequence's tokens). Bytes no op claims are booked
-- to op `other`. The FLOPs of the layer's forward, as torch's FlopCounterMode counts them in the
-- census's own forward (census/measure/flops.py), are the kind's, repeated on each of its op rows at
-- the point `census`, and so is its backward peak. Key: (config_hash, census_version, transformers_version, torch_version, kind, point, op).
CREATE TABLE IF NOT EXISTS measured (
    config_hash       VARCHAR NOT NULL,
    census_version    VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    kind              VARCHAR NOT NULL,
    op                op_name NOT NULL,
    bytes_per_token   DOUBLE NOT NULL,
    seq_length        INTEGER NOT NULL,
    attention_impl    VARCHAR NOT NULL,
    experts_impl      VARCHAR,
    point             VARCHAR NOT NULL DEFAULT 'census',
    tp                INTEGER NOT NULL DEFAULT 1,
    cp                INTEGER NOT NULL DEFAULT 1,
    sequence_parallel BOOLEAN NOT NULL DEFAULT false,
    recompute         VARCHAR[] NOT NULL DEFAULT [],  -- the switches recomputed
    forward_flops     DOUBLE,  -- FLOPs of one layer's forward at the point, one sequence (NULL at points
                               -- across settings, and in specs of census version 8 and before)
    backward_peak     DOUBLE,  -- the most bytes alive at any moment of one layer's backward beyond those
                               -- alive when it began, one sequence (census/measure/backward_peak.py; NULL at
                               -- points across settings, and in specs of census version 16 and before)
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, kind, point, op)
);
