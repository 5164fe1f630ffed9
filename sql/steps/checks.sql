-- Consistency checks of a built catalogue, run before it is published: every row returned is a
-- problem (check, detail) and stops the publish.
--
-- layer_prices, millions of rows, is checked through invariants that cost no scan of it: the
-- store appends each config's prices whole after NightData checked them complete and unique per
-- (kind, setting, mask); here full_prices (one row per kind and setting) must be unique and
-- complete, and layer_prices must hold exactly one row per full_prices row and mask (switch_costs
-- one more, full recompute's).
WITH
n_masks AS (SELECT count(*) AS n FROM switch_sets),
spec_kinds AS (SELECT config_hash, census_version, transformers_version, torch_version, count(*) AS n FROM kinds GROUP BY ALL),
groups AS (
    SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(*) AS n_rows,
           count(DISTINCT kind) AS n_kinds, count(DISTINCT setting_id) AS n_settings
    FROM full_prices GROUP BY ALL
)
SELECT 'layer_prices has one row per full_prices row and mask' AS "check",
       format('{} layer rows, {} full rows x {} masks', l, f, m) AS detail
FROM (SELECT (SELECT count(*) FROM layer_prices) AS l, (SELECT count(*) FROM full_prices) AS f,
             (SELECT n FROM n_masks) AS m)
WHERE l <> f * m
UNION ALL
SELECT 'switch_costs has one row per full_prices row and mask, and one for full recompute',
       format('{} cost rows, {} full rows x ({} masks + 1)', c, f, m)
FROM (SELECT (SELECT count(*) FROM switch_costs) AS c, (SELECT count(*) FROM full_prices) AS f,
             (SELECT n FROM n_masks) AS m)
WHERE c <> f * (m + 1)
UNION ALL
SELECT 'full_prices key unique',
       format('{} {} {} {} {} {} {} stored {} times', config_hash, census_version, transformers_version, torch_version, kind, setting_id, records_version, count(*))
FROM full_prices GROUP BY config_hash, census_version, transformers_version, torch_version, kind, setting_id, records_version HAVING count(*) > 1
UNION ALL
SELECT 'prices cover every kind of the spec at every setting',
       format('{} @ {} / {}: {} rows for {} kinds x {} settings (the spec has {} kinds)',
              g.config_hash, g.census_version, g.records_version, g.n_rows, g.n_kinds, g.n_settings, s.n)
FROM groups AS g LEFT JOIN spec_kinds AS s USING (config_hash, census_version, transformers_version, torch_version)
WHERE s.n IS NULL OR g.n_kinds <> s.n OR g.n_rows <> g.n_kinds * g.n_settings
UNION ALL
SELECT 'prices name a stored kind and setting',
       format('{} @ {}: kind {} setting {}', config_hash, census_version, kind, setting_id)
FROM full_prices AS p
WHERE NOT EXISTS (SELECT 1 FROM kinds AS k WHERE k.config_hash = p.config_hash
                  AND k.census_version = p.census_version AND k.transformers_version = p.transformers_version AND k.torch_version = p.torch_version AND k.kind = p.kind)
   OR setting_id NOT IN (SELECT setting_id FROM settings)
UNION ALL
SELECT 'a setting is priced or infeasible, not both',
       format('{} @ {} / {}: setting {}', i.config_hash, i.census_version, i.records_version, i.setting_id)
FROM (SELECT DISTINCT config_hash, census_version, transformers_version, torch_version, records_version, setting_id FROM infeasible_settings) AS i
WHERE EXISTS (SELECT 1 FROM full_prices AS p WHERE p.config_hash = i.config_hash AND p.census_version = i.census_version AND p.transformers_version = i.transformers_version AND p.torch_version = i.torch_version
              AND p.records_version = i.records_version AND p.setting_id = i.setting_id)
UNION ALL
-- (prices stored before the catalogue kept the ends have none)
SELECT 'end_prices: one row per setting priced',
       format('{} @ {} / {}: {} end rows, {} settings priced', config_hash, census_version, records_version, e, f)
FROM (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(*) AS e, count(DISTINCT setting_id) AS d
      FROM end_prices GROUP BY ALL) AS n
LEFT JOIN (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(DISTINCT setting_id) AS f
           FROM full_prices GROUP BY ALL) AS p USING (config_hash, census_version, transformers_version, torch_version, records_version)
WHERE e IS DISTINCT FROM f OR d IS DISTINCT FROM f
UNION ALL
-- (nor the loss kernels: prices stored before the catalogue kept them have none)
SELECT 'loss_prices: each loss kernel once per setting priced',
       format('{} @ {} / {}: {} rows, {} settings x {} losses of {} settings priced', config_hash, census_version, records_version, c, d, l, f)
FROM (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(*) AS c,
             count(DISTINCT setting_id) AS d, count(DISTINCT loss) AS l, count(DISTINCT (setting_id, loss)) AS u
      FROM loss_prices GROUP BY ALL) AS n
LEFT JOIN (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(DISTINCT setting_id) AS f
           FROM full_prices GROUP BY ALL) AS p USING (config_hash, census_version, transformers_version, torch_version, records_version)
WHERE d IS DISTINCT FROM f OR c <> u OR c <> d * l
UNION ALL
-- (nor the op costs: a config priced before the catalogue kept them has none)
SELECT 'op_costs: each op once per kind and setting priced',
       format('{} @ {} / {}: {} cost rows, {} (kind, setting) priced', config_hash, census_version, records_version, c, f)
FROM (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(*) AS c,
             count(DISTINCT (kind, setting_id)) AS d, count(DISTINCT op) AS o
      FROM op_costs GROUP BY ALL) AS n
LEFT JOIN (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(*) AS f
           FROM full_prices GROUP BY ALL) AS p USING (config_hash, census_version, transformers_version, torch_version, records_version)
WHERE d IS DISTINCT FROM f OR c <> d * o
UNION ALL
SELECT 'op_prices: every (part, op) once per kind and setting',
       format('{} @ {} / {}: {} rows, {} kinds x {} settings x {} (part, op)', config_hash, census_version, records_version, c, k, t, o)
FROM (SELECT config_hash, census_version, transformers_version, torch_version, records_version, count(*) AS c,
             count(DISTINCT kind) AS k, count(DISTINCT setting_id) AS t, count(DISTINCT (part, op)) AS o,
             count(DISTINCT (kind, setting_id, part, op)) AS u
      FROM op_prices GROUP BY ALL)
WHERE c <> k * t * o OR u <> c
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
FROM specs AS s LEFT JOIN (SELECT config_hash, census_version, transformers_version, torch_version, sum(count) AS n FROM stack GROUP BY ALL) AS t
     USING (config_hash, census_version, transformers_version, torch_version)
WHERE t.n IS DISTINCT FROM s.num_hidden_layers
UNION ALL
SELECT 'kinds are in the stack', format('{} @ {}: kind {}', config_hash, census_version, kind)
FROM kinds WHERE layers IS NULL
UNION ALL
SELECT 'spec tables have their spec', format('{} {} @ {}', tbl, config_hash, census_version)
FROM (SELECT DISTINCT 'kinds' AS tbl, config_hash, census_version, transformers_version, torch_version FROM kinds
      UNION SELECT DISTINCT 'stack', config_hash, census_version, transformers_version, torch_version FROM stack
      UNION SELECT DISTINCT 'measured', config_hash, census_version, transformers_version, torch_version FROM measured) AS d
WHERE NOT EXISTS (SELECT 1 FROM specs AS s WHERE s.config_hash = d.config_hash AND s.census_version = d.census_version AND s.transformers_version = d.transformers_version AND s.torch_version = d.torch_version)
UNION ALL
SELECT 'repos have their config', format('{} {}', tbl, repo_id)
FROM (SELECT 'repos' AS tbl, repo_id, config_hash FROM repos
      UNION ALL SELECT 'repo_history', repo_id, config_hash FROM repo_history) AS r
WHERE config_hash IS NOT NULL AND config_hash NOT IN (SELECT config_hash FROM configs)
UNION ALL
SELECT 'rows name a stored run', format('{} {} run {}', tbl, repo_id, run_id)
FROM (SELECT 'repo_history' AS tbl, repo_id, run_id FROM repo_history
      UNION ALL SELECT 'failures', repo_id, run_id FROM failures
      UNION ALL SELECT 'crawls', '', run_id FROM crawls) AS r
WHERE run_id NOT IN (SELECT run_id FROM runs)
UNION ALL
SELECT 'setting_defaults holds one row', format('{} rows', count(*))
FROM setting_defaults HAVING count(*) <> 1
UNION ALL
SELECT 'state_sharding holds every group and state of each recipe', format('{} rows over {} recipes', count(*), count(DISTINCT recipe))
FROM state_sharding HAVING count(*) <> count(DISTINCT recipe) * count(DISTINCT "group") * count(DISTINCT state)
LIMIT 50;
