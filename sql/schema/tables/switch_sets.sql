-- Table switch_sets: one row per combination of the records' selective-recompute switches.
-- Key: mask; bit i of mask set = switch i recomputed (the records' switch order).
CREATE TABLE IF NOT EXISTS switch_sets (
    mask         SMALLINT PRIMARY KEY,
    attBMM       BOOLEAN NOT NULL,
    headCast     BOOLEAN NOT NULL,
    dropout      BOOLEAN NOT NULL,
    softmax      BOOLEAN NOT NULL,
    normOp       BOOLEAN NOT NULL,
    gather       BOOLEAN NOT NULL,
    ffAct        BOOLEAN NOT NULL,
    attUp        BOOLEAN NOT NULL,
    n_recomputed SMALLINT NOT NULL,
    switches     VARCHAR[] NOT NULL,  -- the recomputed switches, in mask-bit order
    name         VARCHAR NOT NULL     -- 'none', 'all', or the switches joined by commas
);
