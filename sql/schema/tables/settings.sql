-- Table settings: one row per setting of every grid stored, one column per field of
-- catalogue/records/settings.yaml, in its order. Key: setting_id (a hash of the fields).
-- sql/schema/tables/setting_defaults.sql has the same columns.
CREATE TABLE IF NOT EXISTS settings (
    setting_id          VARCHAR PRIMARY KEY,
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
