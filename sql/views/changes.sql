-- View changes: what changed between the two latest good nights (previous_run, latest_run;
-- failed and empty nights are skipped): repos added, removed (no longer listed: kept in repos,
-- and marked `listed = false` in latest_specs), with a new config or sha, repriced because the
-- census, records or settings version changed, and every repo still failing in the latest
-- good night, with where and why.
-- Grain: one row per repo_id that changed or is failing.
-- Columns:
--   repo_id          id     the Hub repo
--   change           code   added, removed, config (new config_hash), sha (new commit), repriced (new versions) or failing
--   old_sha          id     the commit the previous night listed
--   new_sha          id     the commit the latest night listed
--   old_config_hash  id     the config the previous night stored
--   new_config_hash  id     the config the latest night stored (NULL when its fetch failed)
--   old_downloads    count  the Hub's download count the previous night
--   new_downloads    count  the Hub's download count the latest night
--   repriced_because text   the versions that changed, as 'census A -> B; records C -> D; settings E -> F'
--   failed_stage     code   where the repo failed in the latest night (vocabulary list stage)
--   failed_reason    code   why (vocabulary list reason)
CREATE OR REPLACE VIEW changes AS
WITH cur AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM latest_run)),
prev AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM previous_run)),
fail AS (SELECT * FROM failures WHERE run_id = (SELECT run_id FROM latest_run)),
versions AS (
    SELECT nullif(concat_ws('; ',
               CASE WHEN p.census_version <> l.census_version THEN 'census ' || p.census_version || ' -> ' || l.census_version END,
               CASE WHEN p.records_version <> l.records_version THEN 'records ' || p.records_version || ' -> ' || l.records_version END,
               CASE WHEN p.settings_version <> l.settings_version THEN 'settings ' || p.settings_version || ' -> ' || l.settings_version END),
           '') AS changed
    FROM latest_run AS l, previous_run AS p
),
joined AS (
    SELECT coalesce(cur.repo_id, prev.repo_id) AS repo_id,
           CASE WHEN prev.repo_id IS NULL THEN 'added'
                WHEN cur.repo_id IS NULL THEN 'removed'
                WHEN cur.config_hash IS DISTINCT FROM prev.config_hash THEN 'config'
                WHEN cur.sha IS DISTINCT FROM prev.sha THEN 'sha'
                WHEN fail.repo_id IS NULL AND (SELECT changed FROM versions) IS NOT NULL THEN 'repriced'
                WHEN fail.repo_id IS NOT NULL THEN 'failing'
           END AS change,
           prev.sha AS old_sha, cur.sha AS new_sha,
           prev.config_hash AS old_config_hash, cur.config_hash AS new_config_hash,
           prev.downloads AS old_downloads, cur.downloads AS new_downloads,
           CASE WHEN cur.repo_id IS NOT NULL AND prev.repo_id IS NOT NULL AND fail.repo_id IS NULL
                THEN (SELECT changed FROM versions) END AS repriced_because,
           fail.stage AS failed_stage, fail.reason AS failed_reason
    FROM cur FULL JOIN prev ON cur.repo_id = prev.repo_id
    LEFT JOIN fail ON fail.repo_id = coalesce(cur.repo_id, prev.repo_id)
)
SELECT * FROM joined WHERE change IS NOT NULL;
