-- Table switch_kept: the ops and parts of the records each switch set keeps the saves of, the
-- latest night's (the store replaces it at every publish): what a set does not recompute
-- (Records.kept). With op_prices it prices a switch set at the memory curve's settings.
-- Key: (mask, op).
CREATE TABLE IF NOT EXISTS switch_kept (
    mask SMALLINT NOT NULL,  -- a switch_sets mask
    op   VARCHAR NOT NULL,   -- an op or part of the records (op_prices.op)
    PRIMARY KEY (mask, op)
);
