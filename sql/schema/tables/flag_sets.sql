-- Table flag_sets: every switch set a framework's flags give (catalogue/records/flags.py), the
-- latest night's: per framework, each combination of its flags that give switches (one row per
-- switch set: the fewest flags), and each full-recompute flag (mask -1), with the command line
-- that asks for it. The view frontier_flags names them beside the frontier's sets. Key:
-- (framework, mask).
CREATE TABLE IF NOT EXISTS flag_sets (
    framework VARCHAR NOT NULL,
    stack     VARCHAR NOT NULL,    -- the stack whose prices the flags describe
    mask      SMALLINT NOT NULL,   -- the switch set they give (switch_sets); -1 for full recompute
    flags     VARCHAR[] NOT NULL,
    command   VARCHAR NOT NULL,
    PRIMARY KEY (framework, mask)
);
