-- Report query refusals: the repos the latest night refused or failed to fetch, with the stage
-- and reason code (the view failures_by_reason, one row per repo).
-- Grain: one row per repo that failed in the latest night.
-- Columns:
--   repo_id  id    the Hub repo
--   stage    code  where it failed (vocabulary list stage)
--   reason   code  why (vocabulary list reason)
SELECT unnest(repo_ids) AS repo_id, stage, reason
FROM failures_by_reason
WHERE run_id = (SELECT run_id FROM latest_run)
ORDER BY repo_id;
