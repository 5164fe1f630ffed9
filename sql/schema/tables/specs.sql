-- Table specs: one row per config and census version, the ModelSpec. Key: (config_hash,
-- census_version). Main dims as columns (NULL where the spec leaves a field absent, never
-- zero), the whole spec as JSON.
CREATE TABLE IF NOT EXISTS specs (
    config_hash             VARCHAR NOT NULL,
    census_version          VARCHAR NOT NULL,
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
    PRIMARY KEY (config_hash, census_version)
);
