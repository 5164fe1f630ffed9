-- The catalogue's ENUM types, one per list of the vocabulary table (catalogue/vocabulary.yaml),
-- its codes in their positions. The vocabulary table is filled before this file runs; every
-- statement is IF NOT EXISTS, so it runs on a fresh catalogue and on a copy alike. A new code
-- changes the type, which makes the next publish rebuild the catalogue (docs/catalogue.md).
--
-- reason: why a repo failed (the census's and the fetch stage's codes); stage: the pipeline
-- stage a failure comes from; run_status, run_source: how a night ended and where its repos
-- came from; gating: the Hub's gated field; attention_flavour, ffn_flavour: a layer kind's
-- flavours; op_name: the op vector plus `other` (measured bytes no op claims); param_cause: why a
-- repo's census parameter count and the Hub's differ (catalogue/hub_params.yaml).
CREATE TYPE IF NOT EXISTS reason AS ENUM (SELECT code FROM vocabulary WHERE list = 'reason' ORDER BY position);
CREATE TYPE IF NOT EXISTS stage AS ENUM (SELECT code FROM vocabulary WHERE list = 'stage' ORDER BY position);
CREATE TYPE IF NOT EXISTS run_status AS ENUM (SELECT code FROM vocabulary WHERE list = 'run_status' ORDER BY position);
CREATE TYPE IF NOT EXISTS run_source AS ENUM (SELECT code FROM vocabulary WHERE list = 'run_source' ORDER BY position);
CREATE TYPE IF NOT EXISTS gating AS ENUM (SELECT code FROM vocabulary WHERE list = 'gating' ORDER BY position);
CREATE TYPE IF NOT EXISTS attention_flavour AS ENUM (SELECT code FROM vocabulary WHERE list = 'attention_flavour' ORDER BY position);
CREATE TYPE IF NOT EXISTS ffn_flavour AS ENUM (SELECT code FROM vocabulary WHERE list = 'ffn_flavour' ORDER BY position);
CREATE TYPE IF NOT EXISTS op_name AS ENUM (SELECT code FROM vocabulary WHERE list = 'op_name' ORDER BY position);
CREATE TYPE IF NOT EXISTS param_cause AS ENUM (SELECT code FROM vocabulary WHERE list = 'param_cause' ORDER BY position);
