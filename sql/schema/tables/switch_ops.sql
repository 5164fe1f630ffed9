-- Table switch_ops: the ops each switch set re-runs, the latest night's (the store replaces it at
-- every publish): a set recomputes the ops and parts of the records whose saves it drops, and
-- full recompute (mask -1) re-runs every op once, the layer's forward (docs/planning.md).
-- Key: (mask, op).
CREATE TABLE IF NOT EXISTS switch_ops (
    mask SMALLINT NOT NULL,  -- a switch_sets mask, or -1 for full recompute
    op   VARCHAR NOT NULL,   -- an op of op_costs
    PRIMARY KEY (mask, op)
);
