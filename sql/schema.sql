-- speccat catalogue schema (DESIGN §4). Every statement is idempotent (IF NOT EXISTS), so the
-- store runs this file on a fresh catalogue and on a copy of the published one alike.
--
-- Keys: every table declares its key as a PRIMARY KEY except the two price tables, whose key
-- (the same columns, listed in a comment) is checked by sql/checks.sql at publish time. An ART
-- index over millions of price rows doubled the file (measured: 559 vs 274 MiB at 1,000
-- configs) and buys nothing a publish-time check does not.
--
-- census_version is part of the key of every table derived from a spec, and records_version of
-- every price: a new census or records version adds rows beside the old ones; nothing stored is lost.

-- Codes. The ENUMs are checked against the Python tuples by tests/test_store_schema.py:
-- reason = speccat.census.spec.REASONS + speccat.catalogue.reasons.FETCH_REASONS.
CREATE TYPE IF NOT EXISTS reason AS ENUM (
    'bad_json', 'remote_code', 'unknown_model_type', 'missing_field', 'bad_value',
    'unsupported_layer', 'kind_conflict', 'too_large', 'timeout', 'census_failed',
    'gated', 'not_found', 'fetch_failed', 'rate_limited'
);
CREATE TYPE IF NOT EXISTS stage AS ENUM ('list', 'fetch', 'census', 'price');
CREATE TYPE IF NOT EXISTS run_status AS ENUM ('completed', 'partial', 'failed');
CREATE TYPE IF NOT EXISTS run_source AS ENUM ('hub', 'snapshot');
CREATE TYPE IF NOT EXISTS gating AS ENUM ('no', 'auto', 'manual');
CREATE TYPE IF NOT EXISTS attention_flavour AS ENUM ('full', 'linear');
CREATE TYPE IF NOT EXISTS ffn_flavour AS ENUM ('dense', 'moe');
CREATE TYPE IF NOT EXISTS op_name AS ENUM (
    'attMM', 'attBMM', 'ffMM', 'softmax', 'dropout', 'normOp', 'gather', 'headCast', 'ffAct',
    'linrec', 'other'
);

CREATE TABLE IF NOT EXISTS runs (
    run_id               VARCHAR PRIMARY KEY,
    started              TIMESTAMPTZ NOT NULL,
    ended                TIMESTAMPTZ NOT NULL,
    status               run_status NOT NULL,
    source               run_source NOT NULL,
    speccat_version      VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,
    torch_version        VARCHAR NOT NULL,
    census_version       VARCHAR NOT NULL,
    records_version      VARCHAR NOT NULL,
    profiles_version     VARCHAR NOT NULL,
    settings_version     VARCHAR NOT NULL,
    n_repos              INTEGER NOT NULL,  -- repos listed this run
    n_configs            INTEGER NOT NULL,  -- distinct configs among them
    n_specs              INTEGER NOT NULL,  -- specs censused this run (carried ones not counted)
    n_failures           INTEGER NOT NULL
);

-- One row per repo and run: what the source said that night. NULL where it said nothing
-- (snapshot rows have no sha, downloads or likes); config_hash is NULL when the fetch failed.
CREATE TABLE IF NOT EXISTS repo_history (
    repo_id       VARCHAR NOT NULL,
    run_id        VARCHAR NOT NULL,
    sha           VARCHAR,
    last_modified TIMESTAMPTZ,
    downloads     BIGINT,
    likes         BIGINT,
    gated         gating,
    license       VARCHAR,
    pipeline_tag  VARCHAR,
    config_hash   VARCHAR,
    PRIMARY KEY (repo_id, run_id)
);

-- The latest history row of every repo ever seen (latest by the run's start), refreshed from
-- repo_history at every publish. A failed fetch at an unchanged sha keeps the known config_hash.
CREATE TABLE IF NOT EXISTS repos (
    repo_id       VARCHAR PRIMARY KEY,
    sha           VARCHAR,
    last_modified TIMESTAMPTZ,
    downloads     BIGINT,
    likes         BIGINT,
    gated         gating,
    license       VARCHAR,
    pipeline_tag  VARCHAR,
    config_hash   VARCHAR
);

CREATE TABLE IF NOT EXISTS configs (
    config_hash VARCHAR PRIMARY KEY,
    model_type  VARCHAR,
    config      JSON NOT NULL
);

-- Main dims as columns (NULL where the spec leaves a field absent), the whole spec as JSON.
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
    PRIMARY KEY (config_hash, census_version)
);
-- The transformers class the census built (a remote-code config's substitute); added after the
-- table's first version, so it is the last column of old and new catalogues alike.
ALTER TABLE specs ADD COLUMN IF NOT EXISTS built_as VARCHAR;

-- One row per layer kind of a spec: flavours, how many layers of the stack, op counts and the
-- parameters of one layer of that kind.
CREATE TABLE IF NOT EXISTS kinds (
    config_hash       VARCHAR NOT NULL,
    census_version    VARCHAR NOT NULL,
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
    PRIMARY KEY (config_hash, census_version, kind)
);

-- The layer stack as run-length groups, position 0 first.
CREATE TABLE IF NOT EXISTS stack (
    config_hash    VARCHAR NOT NULL,
    census_version VARCHAR NOT NULL,
    position       SMALLINT NOT NULL,
    kind           VARCHAR NOT NULL,
    count          INTEGER NOT NULL,
    PRIMARY KEY (config_hash, census_version, position)
);

-- Bytes autograd saved per token for each op of one layer of a kind (DESIGN §2.5).
CREATE TABLE IF NOT EXISTS measured (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    op              op_name NOT NULL,
    bytes_per_token DOUBLE NOT NULL,
    seq_length      INTEGER NOT NULL,
    attention_impl  VARCHAR NOT NULL,
    experts_impl    VARCHAR,
    PRIMARY KEY (config_hash, census_version, kind, op)
);

-- One column per field of catalogue/settings.yaml (DESIGN §3.4), in its order.
CREATE TABLE IF NOT EXISTS settings (
    setting_id          VARCHAR PRIMARY KEY,
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

-- Every combination of the records' switches: bit i of mask set = switch i recomputed.
CREATE TABLE IF NOT EXISTS switch_sets (
    mask         SMALLINT PRIMARY KEY,
    attBMM       BOOLEAN NOT NULL,
    headCast     BOOLEAN NOT NULL,
    dropout      BOOLEAN NOT NULL,
    softmax      BOOLEAN NOT NULL,
    normOp       BOOLEAN NOT NULL,
    gather       BOOLEAN NOT NULL,
    ffAct        BOOLEAN NOT NULL,
    attUp        BOOLEAN NOT NULL,
    n_recomputed SMALLINT NOT NULL,
    switches     VARCHAR[] NOT NULL,  -- the recomputed switches, in mask-bit order
    name         VARCHAR NOT NULL     -- 'none', 'all', or the switches joined by commas
);

-- Bytes one layer of a kind keeps, per rank and micro-batch. Key: (config_hash,
-- census_version, kind, setting_id, mask, records_version), checked by sql/checks.sql.
CREATE TABLE IF NOT EXISTS layer_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    mask            SMALLINT NOT NULL,
    records_version VARCHAR NOT NULL,
    attention       DOUBLE NOT NULL,
    ffn             DOUBLE NOT NULL,
    norm            DOUBLE NOT NULL,
    total           DOUBLE NOT NULL
);

-- Bytes one fully recomputed layer keeps (its input). Key: (config_hash, census_version, kind,
-- setting_id, records_version), checked by sql/checks.sql.
CREATE TABLE IF NOT EXISTS full_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    records_version VARCHAR NOT NULL,
    kept            DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS failures (
    run_id  VARCHAR NOT NULL,
    repo_id VARCHAR NOT NULL,
    stage   stage NOT NULL,
    reason  reason NOT NULL,
    message VARCHAR NOT NULL,
    PRIMARY KEY (run_id, repo_id)
);
