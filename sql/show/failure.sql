-- `speccat show`, for a repo with no spec at the latest census version: its latest failure
-- (the night, stage, reason and message), by the night's start. Parameter: repo_id.
SELECT f.run_id, r.started, f.stage, f.reason, f.message
FROM failures AS f JOIN runs AS r USING (run_id)
WHERE f.repo_id = getvariable('repo_id')
ORDER BY r.started DESC, f.run_id DESC
LIMIT 1;
