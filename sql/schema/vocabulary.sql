-- Table vocabulary: every code of the catalogue's ENUM types, with what it means.
-- Grain: one row per (list, code).
--
-- The store fills it from catalogue/vocabulary.yaml (`vocabulary_rows()`) before
-- sql/schema/types.sql makes the ENUM types from it, and refreshes it at every publish
-- (sql/steps/merge.sql), so a reader of the catalogue can look up what a code means:
--   SELECT code, description FROM vocabulary WHERE list = 'reason' ORDER BY position;
CREATE TABLE IF NOT EXISTS vocabulary (
    list        VARCHAR NOT NULL,  -- the ENUM type the code belongs to: reason, stage, run_status, ...
    code        VARCHAR NOT NULL,  -- the code as stored in the tables
    position    INTEGER NOT NULL,  -- its place in the ENUM, 0 first (ENUMs sort in this order)
    description VARCHAR NOT NULL,  -- what the code means
    PRIMARY KEY (list, code)
);
