-- The batch of specs sql/steps/fits_on.sql answers next ($config_hashes, a list), as the
-- variable the planner's macros read (rank_stages: asked by specs, a row per spec).
SET VARIABLE config_hashes = $config_hashes::VARCHAR[];
