-- View changes: what changed between the previous night and the latest one: repos added,
-- removed, or whose config or sha changed, and why a repo that failed in the latest night
-- failed.
-- Grain: one row per repo_id that changed.
-- Columns:
--   repo_id          id     the Hub repo
--   change           code   added, removed, config (a new config_hash) or sha (a new commit, same config)
--   old_sha          id     the commit the previous night listed
--   new_sha          id     the commit the latest night listed
--   old_config_hash  id     the config the previous night stored
--   new_config_hash  id     the config the latest night stored (NULL when its fetch failed)
--   old_downloads    count  the Hub's download count the previous night
--   new_downloads    count  the Hub's download count the latest night
--   failed_stage     code   where the repo failed in the latest night (vocabulary list stage)
--   failed_reason    code   why (vocabulary list reason)
CREATE OR REPLACE VIEW changes AS
WITH cur AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM latest_run)),
prev AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM previous_run)),
joined AS (
    SELECT coalesce(cur.repo_id, prev.repo_id) AS repo_id,
           CASE WHEN prev.repo_id IS NULL THEN 'added'
                WHEN cur.repo_id IS NULL THEN 'removed'
                WHEN cur.config_hash IS DISTINCT FROM prev.config_hash THEN 'config'
                WHEN cur.sha IS DISTINCT FROM prev.sha THEN 'sha'
           END AS change,
           prev.sha AS old_sha, cur.sha AS new_sha,
           prev.config_hash AS old_config_hash, cur.config_hash AS new_config_hash,
           prev.downloads AS old_downloads, cur.downloads AS new_downloads
    FROM cur FULL JOIN prev ON cur.repo_id = prev.repo_id
)
SELECT j.*, f.stage AS failed_stage, f.reason AS failed_reason
FROM joined AS j
LEFT JOIN failures AS f ON f.repo_id = j.repo_id AND f.run_id = (SELECT run_id FROM latest_run)
WHERE j.change IS NOT NULL;
