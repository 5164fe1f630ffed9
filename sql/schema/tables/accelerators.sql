-- Table accelerators: catalogue/records/accelerators.yaml as rows, the latest night's (the store
-- replaces it at every publish): each named accelerator's peak dense BF16 tensor FLOP/s and
-- memory bandwidth from its vendor's datasheet, its memory, the GPUs of one node and its host
-- link. An op's estimated time is max(flops / peak, bytes / bandwidth); offloaded activations
-- cross the host link once each way. Key: accelerator.
CREATE TABLE IF NOT EXISTS accelerators (
    accelerator           VARCHAR PRIMARY KEY,
    default_accelerator   BOOLEAN NOT NULL,  -- the one estimated on when none is named
    peak_flops_per_s      DOUBLE NOT NULL,
    bandwidth_bytes_per_s DOUBLE NOT NULL,
    memory_bytes          DOUBLE NOT NULL,
    node_gpus             INTEGER NOT NULL,
    host_link_bytes_per_s DOUBLE            -- one direction (NULL: stored before it was read)
);
