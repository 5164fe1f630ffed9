-- Consistency checks of a built catalogue, run before it is published: every row returned is a
-- problem (check, detail) and stops the publish. Tables are checked whole, except the prices,
-- whose groups are checked when they arrive (tonight's groups, in `incoming`): carried groups
-- passed these checks on the night they were stored.
WITH
tonight AS (
    SELECT DISTINCT config_hash, census_version, records_version FROM incoming.layer_prices
    UNION SELECT DISTINCT config_hash, census_version, records_version FROM incoming.full_prices
),
lp AS (SELECT p.* FROM layer_prices AS p SEMI JOIN tonight USING (config_hash, census_version, records_version)),
fp AS (SELECT p.* FROM full_prices AS p SEMI JOIN tonight USING (config_hash, census_version, records_version)),
n_masks AS (SELECT count(*) AS n FROM switch_sets),
spec_kinds AS (SELECT config_hash, census_version, count(*) AS n FROM kinds GROUP BY ALL),
lp_groups AS (
    SELECT config_hash, census_version, records_version, count(*) AS n_rows,
           count(DISTINCT kind) AS n_kinds, count(DISTINCT setting_id) AS n_settings
    FROM lp GROUP BY ALL
)
SELECT 'layer_prices key unique' AS "check",
       format('{} {} {} {} {} {} stored {} times', config_hash, census_version, kind, setting_id, mask, records_version, count(*)) AS detail
FROM lp GROUP BY config_hash, census_version, kind, setting_id, mask, records_version HAVING count(*) > 1
UNION ALL
SELECT 'full_prices key unique',
       format('{} {} {} {} {} stored {} times', config_hash, census_version, kind, setting_id, records_version, count(*))
FROM fp GROUP BY config_hash, census_version, kind, setting_id, records_version HAVING count(*) > 1
UNION ALL
SELECT 'layer_prices complete',
       format('{} @ {} / {}: {} rows for {} kinds x {} settings x {} masks (the spec has {} kinds)',
              g.config_hash, g.census_version, g.records_version, g.n_rows, g.n_kinds, g.n_settings,
              (SELECT n FROM n_masks), s.n)
FROM lp_groups AS g LEFT JOIN spec_kinds AS s USING (config_hash, census_version)
WHERE s.n IS NULL OR g.n_kinds <> s.n OR g.n_rows <> g.n_kinds * g.n_settings * (SELECT n FROM n_masks)
UNION ALL
SELECT 'full_prices match layer_prices',
       format('{} @ {} / {}: full recompute priced for {} (kind, setting) pairs, layers for {}',
              config_hash, census_version, records_version, coalesce(f.n, 0), coalesce(l.n, 0))
FROM (SELECT config_hash, census_version, records_version, count(*) AS n FROM fp GROUP BY ALL) AS f
FULL JOIN (SELECT config_hash, census_version, records_version, count(DISTINCT (kind, setting_id)) AS n
           FROM lp GROUP BY ALL) AS l USING (config_hash, census_version, records_version)
WHERE f.n IS DISTINCT FROM l.n
UNION ALL
SELECT 'prices name a stored kind, setting and mask',
       format('{} @ {}: kind {} setting {} mask {}', config_hash, census_version, kind, setting_id, mask)
FROM (SELECT DISTINCT config_hash, census_version, kind, setting_id, mask FROM lp) AS p
WHERE NOT EXISTS (SELECT 1 FROM kinds AS k WHERE k.config_hash = p.config_hash
                  AND k.census_version = p.census_version AND k.kind = p.kind)
   OR setting_id NOT IN (SELECT setting_id FROM settings)
   OR mask NOT IN (SELECT mask FROM switch_sets)
UNION ALL
SELECT 'switch_sets complete',
       format('{} masks for {} switches', count(*), any_value(len(switches)))
FROM switch_sets
HAVING count(*) > 0 AND (count(*) <> 2 ** max(n_recomputed) OR max(mask) <> count(*) - 1)
UNION ALL
SELECT 'specs have their config', format('{} @ {}', config_hash, census_version)
FROM specs WHERE config_hash NOT IN (SELECT config_hash FROM configs)
UNION ALL
SELECT 'stack adds up to num_hidden_layers',
       format('{} @ {}: stack {} layers, spec {}', s.config_hash, s.census_version, t.n, s.num_hidden_layers)
FROM specs AS s LEFT JOIN (SELECT config_hash, census_version, sum(count) AS n FROM stack GROUP BY ALL) AS t
     USING (config_hash, census_version)
WHERE t.n IS DISTINCT FROM s.num_hidden_layers
UNION ALL
SELECT 'kinds are in the stack', format('{} @ {}: kind {}', config_hash, census_version, kind)
FROM kinds WHERE layers IS NULL
UNION ALL
SELECT 'spec tables have their spec', format('{} {} @ {}', tbl, config_hash, census_version)
FROM (SELECT DISTINCT 'kinds' AS tbl, config_hash, census_version FROM kinds
      UNION SELECT DISTINCT 'stack', config_hash, census_version FROM stack
      UNION SELECT DISTINCT 'measured', config_hash, census_version FROM measured) AS d
WHERE NOT EXISTS (SELECT 1 FROM specs AS s WHERE s.config_hash = d.config_hash AND s.census_version = d.census_version)
UNION ALL
SELECT 'repos have their config', format('{} {}', tbl, repo_id)
FROM (SELECT 'repos' AS tbl, repo_id, config_hash FROM repos
      UNION ALL SELECT 'repo_history', repo_id, config_hash FROM repo_history) AS r
WHERE config_hash IS NOT NULL AND config_hash NOT IN (SELECT config_hash FROM configs)
UNION ALL
SELECT 'rows name a stored run', format('{} {} run {}', tbl, repo_id, run_id)
FROM (SELECT 'repo_history' AS tbl, repo_id, run_id FROM repo_history
      UNION ALL SELECT 'failures', repo_id, run_id FROM failures) AS r
WHERE run_id NOT IN (SELECT run_id FROM runs)
LIMIT 50;
