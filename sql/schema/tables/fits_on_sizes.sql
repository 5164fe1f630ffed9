-- Table fits_on_sizes: the memory sizes the table fits_on answers at (catalogue/records/fits_on.yaml),
-- the latest night's (the store replaces it when a night states them), with the recipe and the
-- accelerator every answer assumes. Key: gpu_mem_gib.
CREATE TABLE IF NOT EXISTS fits_on_sizes (
    plan_version VARCHAR NOT NULL,   -- a hash of fits_on.yaml, the grid, states.yaml and accelerators.yaml: what fits_on's rows read beside the prices
    gpu_mem_gib  INTEGER PRIMARY KEY,
    accelerators VARCHAR NOT NULL,   -- the accelerators sold at about that size (fits_on.yaml)
    recipe       VARCHAR NOT NULL,   -- states.yaml's default recipe
    accelerator  VARCHAR NOT NULL    -- accelerators.yaml's default: recompute time is estimated on it, and its node bounds tp and cp
);
