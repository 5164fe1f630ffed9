-- A lake's one-row counter of publishes. Every publish increments it (lake_epoch_bump.sql), so
-- two overlapping publishes conflict and the later one runs again from a fresh snapshot,
-- where it sees what the other stored (docs/catalogue.md, DuckLake).
CREATE TABLE IF NOT EXISTS lake_epoch (epoch BIGINT NOT NULL);
INSERT INTO lake_epoch SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM lake_epoch);
