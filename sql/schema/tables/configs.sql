-- Table configs: one row per distinct config (config_hash), its model_type and the raw JSON
-- of the first repo stored under that hash. Key: config_hash.
CREATE TABLE IF NOT EXISTS configs (
    config_hash VARCHAR PRIMARY KEY,
    model_type  VARCHAR,
    config      JSON NOT NULL
);
