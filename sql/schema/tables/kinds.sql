-- Table kinds: one row per layer kind of a spec: its flavours, how many layers of the stack
-- are of it, its op counts (the op vector, catalogue/vocabulary.yaml `ops`, in order) and the
-- parameters of one layer of it. Key: (config_hash, census_version, transformers_version, torch_version, kind).
CREATE TABLE IF NOT EXISTS kinds (
    config_hash       VARCHAR NOT NULL,
    census_version    VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    kind              VARCHAR NOT NULL,
    attention         attention_flavour,
    ffn               ffn_flavour,
    layers            INTEGER NOT NULL,
    attMM             SMALLINT NOT NULL,
    attBMM            SMALLINT NOT NULL,
    ffMM              SMALLINT NOT NULL,
    softmax           SMALLINT NOT NULL,
    dropout           SMALLINT NOT NULL,
    normOp            SMALLINT NOT NULL,
    gather            SMALLINT NOT NULL,
    headCast          SMALLINT NOT NULL,
    ffAct             SMALLINT NOT NULL,
    linrec            SMALLINT NOT NULL,
    params_attention  BIGINT,
    params_ffn_routed BIGINT,
    params_ffn_shared BIGINT,
    params_ffn_router BIGINT,
    params_ffn_dense  BIGINT,
    params_norm       BIGINT,
    params_other      BIGINT,
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, kind)
);
