-- View changes: what changed between the two latest good nights (previous_run, latest_run;
-- failed and empty nights are skipped): repos added, removed (no longer listed: kept in repos,
-- and marked `listed = false` in latest_specs), with a new config or sha, repriced because the
-- census, records or settings version or the transformers or torch package changed, every repo
-- still failing in the latest good night, with where and why; and, per repo and kind, the bytes
-- that changed under the same config: what the census measured and what the records priced, at
-- the census's own setting. The transformers and torch that measured a spec are part of its key
-- (sql/schema/tables/specs.sql), so a night on a new library censuses every config again and
-- these `bytes` rows are the catalogue's changelog of what a library release changed.
-- Grain: one row per repo_id that changed or is failing (kind NULL), plus one per repo_id and
-- kind whose measured or priced bytes per token differ between the two nights (change `bytes`).
-- Columns:
--   repo_id                   id           the Hub repo
--   change                    code         added, removed, config (new config_hash), sha (new commit), repriced (new versions), failing, or bytes (a kind's bytes changed)
--   old_sha                   id           the commit the previous night listed
--   new_sha                   id           the commit the latest night listed
--   old_config_hash           id           the config the previous night stored
--   new_config_hash           id           the config the latest night stored (NULL when its fetch failed)
--   old_downloads             count        the Hub's download count the previous night
--   new_downloads             count        the Hub's download count the latest night
--   repriced_because          text         the versions that changed, as 'census A -> B; transformers C -> D; torch E -> F; records G -> H; settings I -> J'
--   failed_stage              code         where the repo failed in the latest night (vocabulary list stage)
--   failed_reason             code         why (vocabulary list reason)
--   old_transformers_version  version      the transformers package of the previous night
--   new_transformers_version  version      the transformers package of the latest night
--   old_torch_version         version      the torch package of the previous night
--   new_torch_version         version      the torch package of the latest night
--   kind                      code         the layer kind whose bytes changed (NULL but on `bytes` rows)
--   old_measured_per_token    bytes/token  what one layer of the kind kept, as the previous night's spec measured it at the census's setting (every op, `cached` aside)
--   new_measured_per_token    bytes/token  the same, as the latest night's spec measured it
--   measured_change_pct       percent      100 x (new - old) / old measured bytes (NULL where either is missing or old is 0)
--   old_priced_per_token      bytes/token  the records' price of one layer of the kind at the census's setting, the previous night's (point_prices)
--   new_priced_per_token      bytes/token  the same, the latest night's
--   priced_change_pct         percent      100 x (new - old) / old priced bytes
CREATE OR REPLACE VIEW changes AS
WITH cur AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM latest_run)),
prev AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM previous_run)),
fail AS (SELECT * FROM failures WHERE run_id = (SELECT run_id FROM latest_run)),
versions AS (
    SELECT nullif(concat_ws('; ',
               CASE WHEN p.census_version <> l.census_version THEN 'census ' || p.census_version || ' -> ' || l.census_version END,
               CASE WHEN p.transformers_version <> l.transformers_version
                    THEN 'transformers ' || p.transformers_version || ' -> ' || l.transformers_version END,
               CASE WHEN p.torch_version <> l.torch_version THEN 'torch ' || p.torch_version || ' -> ' || l.torch_version END,
               CASE WHEN p.records_version <> l.records_version THEN 'records ' || p.records_version || ' -> ' || l.records_version END,
               CASE WHEN p.settings_version <> l.settings_version THEN 'settings ' || p.settings_version || ' -> ' || l.settings_version END),
           '') AS changed,
           p.transformers_version AS old_transformers_version, l.transformers_version AS new_transformers_version,
           p.torch_version AS old_torch_version, l.torch_version AS new_torch_version
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
),
-- Per night, the bytes per token of each kind of each config the night listed, from the spec
-- at that night's census version and libraries: measured at the census's own setting, and the
-- records' price at that setting under that night's records.
night_bytes AS (
    SELECT n.night, m.config_hash, m.kind,
           sum(m.bytes_per_token) FILTER (WHERE m.op <> 'cached') AS measured_per_token,
           any_value(p.priced_per_token) AS priced_per_token
    FROM (SELECT 'old' AS night, * FROM previous_run UNION ALL SELECT 'new', * FROM latest_run) AS n
    JOIN measured AS m ON m.census_version = n.census_version AND m.transformers_version = n.transformers_version
                      AND m.torch_version = n.torch_version AND m.point = 'census'
    LEFT JOIN point_prices AS p ON p.config_hash = m.config_hash AND p.census_version = m.census_version
                               AND p.transformers_version = m.transformers_version AND p.torch_version = m.torch_version
                               AND p.records_version = n.records_version AND p.kind = m.kind AND p.point = 'census'
    WHERE m.config_hash IN (SELECT config_hash FROM cur UNION SELECT config_hash FROM prev)
    GROUP BY ALL
),
-- A kind of a config both nights hold a spec of, under a repo listed with that config both nights.
paired AS (
    SELECT coalesce(o.config_hash, n.config_hash) AS config_hash, coalesce(o.kind, n.kind) AS kind,
           o.measured_per_token AS old_measured_per_token, n.measured_per_token AS new_measured_per_token,
           o.priced_per_token AS old_priced_per_token, n.priced_per_token AS new_priced_per_token
    FROM (SELECT * FROM night_bytes WHERE night = 'old') AS o
    FULL JOIN (SELECT * FROM night_bytes WHERE night = 'new') AS n ON n.config_hash = o.config_hash AND n.kind = o.kind
),
kind_bytes AS (
    SELECT cur.repo_id, k.*
    FROM cur JOIN prev ON prev.repo_id = cur.repo_id AND prev.config_hash = cur.config_hash
    JOIN paired AS k ON k.config_hash = cur.config_hash
    WHERE k.config_hash IN (SELECT config_hash FROM night_bytes WHERE night = 'old')
      AND k.config_hash IN (SELECT config_hash FROM night_bytes WHERE night = 'new')
)
SELECT j.*, v.old_transformers_version, v.new_transformers_version, v.old_torch_version, v.new_torch_version,
       NULL::VARCHAR AS kind, NULL::DOUBLE AS old_measured_per_token, NULL::DOUBLE AS new_measured_per_token,
       NULL::DOUBLE AS measured_change_pct, NULL::DOUBLE AS old_priced_per_token, NULL::DOUBLE AS new_priced_per_token,
       NULL::DOUBLE AS priced_change_pct
FROM joined AS j, versions AS v WHERE j.change IS NOT NULL
UNION ALL
SELECT k.repo_id, 'bytes', prev.sha, cur.sha, prev.config_hash, cur.config_hash, prev.downloads, cur.downloads,
       (SELECT changed FROM versions), NULL, NULL,
       v.old_transformers_version, v.new_transformers_version, v.old_torch_version, v.new_torch_version,
       k.kind, k.old_measured_per_token, k.new_measured_per_token,
       100 * (k.new_measured_per_token - k.old_measured_per_token) / nullif(k.old_measured_per_token, 0),
       k.old_priced_per_token, k.new_priced_per_token,
       100 * (k.new_priced_per_token - k.old_priced_per_token) / nullif(k.old_priced_per_token, 0)
FROM kind_bytes AS k JOIN cur USING (repo_id) JOIN prev USING (repo_id), versions AS v
WHERE k.old_measured_per_token IS DISTINCT FROM k.new_measured_per_token
   OR k.old_priced_per_token IS DISTINCT FROM k.new_priced_per_token;
