-- Every Hub repo the catalogue holds, at the sha it was last listed with, its config there, and whether that sha
-- is settled: its config is stored, or its last failure is one another try at the same sha would
-- repeat (gated, not found, not JSON). A `--scope all` night fetches a listed repo only when its
-- sha is new, changed or unsettled (a failure in $retried, e.g. fetch_failed, rate_limited).
WITH hub AS (
    SELECT DISTINCT h.repo_id FROM repo_history AS h JOIN runs AS r USING (run_id) WHERE r.source = 'hub'
),
last_failure AS (
    SELECT f.repo_id, arg_max(f.reason::VARCHAR, r.started) AS reason
    FROM failures AS f JOIN runs AS r USING (run_id)
    GROUP BY f.repo_id
)
SELECT p.repo_id, p.sha, p.config_hash,
       p.config_hash IS NOT NULL OR (lf.reason IS NOT NULL AND NOT list_contains($retried::VARCHAR[], lf.reason)) AS settled
FROM repos AS p JOIN hub USING (repo_id) LEFT JOIN last_failure AS lf USING (repo_id)
ORDER BY p.repo_id;
