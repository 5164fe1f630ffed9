-- Table specs: one row per config, census version and library that measured it, the
-- ModelSpec. Key: (config_hash, census_version, transformers_version, torch_version): the
-- transformers and torch packages are part of a measurement's identity, so a night on a new
-- library censuses every config again and stores the new spec beside the old one. Main dims as
-- columns (NULL where the spec leaves a field absent, never zero), the whole spec as JSON.
CREATE TABLE IF NOT EXISTS specs (
    config_hash             VARCHAR NOT NULL,
    census_version          VARCHAR NOT NULL,
    transformers_version    VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version           VARCHAR NOT NULL,  -- the torch package that measured the spec
    name                    VARCHAR NOT NULL,
    arch                    VARCHAR NOT NULL,
    hidden_size             INTEGER NOT NULL,
    num_hidden_layers       INTEGER NOT NULL,
    num_attention_heads     INTEGER NOT NULL,
    num_key_value_heads     INTEGER,
    head_dim                INTEGER,
    intermediate_size       INTEGER,
    vocab_size              INTEGER NOT NULL,
    max_position_embeddings INTEGER,
    num_experts             INTEGER,
    num_experts_per_tok     INTEGER,
    moe_intermediate_size   INTEGER,
    kv_lora_rank            INTEGER,
    q_lora_rank             INTEGER,
    sliding_window          INTEGER,
    tie_word_embeddings     BOOLEAN,
    spec                    JSON NOT NULL,
    built_as                VARCHAR,  -- the transformers class the census built (a remote-code config's substitute)
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version)
);
