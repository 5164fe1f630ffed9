-- Table fits_on: what fits, for every model at once. Per spec (at the versions its prices are
-- keyed by) and plan_version (fits_on_sizes), per stack, sequence length, GPU count and memory
-- size: the layout and switch set `speccat fit` lists first for that question (the fewest
-- estimated recompute seconds per sequence, then the fewest bytes on the fullest rank), with its
-- bytes (under the model's own loss, losses.is_default) and recompute overhead, or fits = false and NULLs where nothing fits. Built by
-- sql/steps/fits_on.sql from the stored prices for every latest spec that lacks rows at the
-- latest night's plan_version; rows are kept like prices (nothing stored is lost). The view
-- repo_fits_on reads it per repo.
-- Key: (config_hash, census_version, transformers_version, torch_version, records_version, plan_version,
-- stack, seq_length, gpus, gpu_mem_gib).
CREATE TABLE IF NOT EXISTS fits_on (
    config_hash          VARCHAR NOT NULL,
    census_version       VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,
    torch_version        VARCHAR NOT NULL,
    records_version      VARCHAR NOT NULL,
    plan_version         VARCHAR NOT NULL,
    stack                VARCHAR NOT NULL,
    seq_length           INTEGER NOT NULL,
    gpus                 INTEGER NOT NULL,
    gpu_mem_gib          INTEGER NOT NULL,
    fits                 BOOLEAN NOT NULL,
    dp                   INTEGER,
    tp                   INTEGER,
    pp                   INTEGER,
    cp                   INTEGER,
    ep                   INTEGER,
    zero                 INTEGER,
    mask                 SMALLINT,           -- the switch set (switch_sets); -1 for full recompute
    switch_set           VARCHAR,
    fullest_stage        INTEGER,
    activation_bytes     DOUBLE,
    ends_bytes           DOUBLE,
    loss_working_bytes   DOUBLE,             -- the model's own loss's working set on the rank holding the head (NULL: stored before it was priced)
    remade_bytes         DOUBLE,             -- one layer's saves its backward remakes under the set, the stage's largest (NULL: stored before it was priced)
    backward_bytes       DOUBLE,             -- one layer's backward beyond its saves: what it remakes and its working set, the stage's largest (NULL: stored before it was priced)
    weight_bytes         DOUBLE,
    grad_bytes           DOUBLE,
    optimizer_bytes      DOUBLE,
    total_bytes          DOUBLE,             -- what the fullest stage's rank holds
    recompute_s_per_seq  DOUBLE,
    overhead_pct         DOUBLE
);
