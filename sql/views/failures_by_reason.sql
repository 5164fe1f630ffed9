-- View failures_by_reason: the failures of every night, grouped by stage and reason.
-- Grain: one row per (run_id, stage, reason).
-- Columns:
--   run_id    id     the night
--   started   time   when the night started (UTC)
--   stage     code   where the repos failed (vocabulary list stage)
--   reason    code   why they failed (vocabulary list reason)
--   repos     count  repos that failed so
--   repo_ids  list   those repos, sorted
CREATE OR REPLACE VIEW failures_by_reason AS
SELECT f.run_id, r.started, f.stage, f.reason, count(*) AS repos, list(f.repo_id ORDER BY f.repo_id) AS repo_ids
FROM failures AS f JOIN runs AS r USING (run_id)
GROUP BY f.run_id, r.started, f.stage, f.reason;
