-- Failures of one run (the latest by default) by stage and reason, most frequent first.
-- Parameters: run_id (optional).
SELECT stage, reason, repos, repo_ids
FROM failures_by_reason
WHERE run_id = coalesce(getvariable('run_id'), (SELECT run_id FROM latest_run))
ORDER BY repos DESC, stage, reason;
