-- Table setting_defaults: one row, the default setting of the latest night's grid: each field
-- of catalogue/records/settings.yaml at its first value. The store replaces it at every
-- publish. Views and queries read a field's default from here when its variable is unset:
--   coalesce(getvariable('seq_length'), (SELECT seq_length FROM setting_defaults))
-- and so does `speccat show`. The columns are the settings table's (a test keeps them equal).
CREATE TABLE IF NOT EXISTS setting_defaults (
    setting_id          VARCHAR NOT NULL,
    stack               VARCHAR NOT NULL,
    seq_length          INTEGER NOT NULL,
    micro_batch         INTEGER NOT NULL,
    tp                  INTEGER NOT NULL,
    cp                  INTEGER NOT NULL,
    sequence_parallel   BOOLEAN NOT NULL,
    flash_attention     BOOLEAN NOT NULL,
    cp_algo             VARCHAR NOT NULL,
    dtype               VARCHAR NOT NULL,
    in_flight           INTEGER NOT NULL,
    param_casts         BOOLEAN NOT NULL,
    grouped_gemm        BOOLEAN NOT NULL,
    dropless_tok_factor DOUBLE NOT NULL,
    capacity_factor     DOUBLE NOT NULL
);
