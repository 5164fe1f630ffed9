-- `speccat show`: bytes per layer of each kind and for the whole model under the common switch
-- sets (none, each switch alone, all, full recompute) at one setting, latest versions.
-- Parameters: repo_id, setting_id.
SET VARIABLE _config_hash = (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id'));

WITH v AS (SELECT census_version, transformers_version, torch_version, records_version FROM latest_run),
common AS (SELECT mask, name, n_recomputed FROM switch_sets WHERE n_recomputed <= 1 OR name = 'all'),
layer AS (
    SELECT c.name AS switch_set, c.n_recomputed, p.mask, p.kind, p.attention, p.ffn, p.norm, p.total,
           p.config_hash, p.census_version, p.transformers_version, p.torch_version, p.records_version, p.setting_id
    FROM layer_prices AS p JOIN common AS c USING (mask)
    WHERE p.config_hash = getvariable('_config_hash') AND p.setting_id = getvariable('setting_id')
      AND (p.census_version, p.transformers_version, p.torch_version, p.records_version) = (SELECT (census_version, transformers_version, torch_version, records_version) FROM v)
    UNION ALL
    SELECT 'full', NULL, NULL, f.kind, NULL, NULL, NULL, f.kept,
           f.config_hash, f.census_version, f.transformers_version, f.torch_version, f.records_version, f.setting_id
    FROM full_prices AS f
    WHERE f.config_hash = getvariable('_config_hash') AND f.setting_id = getvariable('setting_id')
      AND (f.census_version, f.transformers_version, f.torch_version, f.records_version) = (SELECT (census_version, transformers_version, torch_version, records_version) FROM v)
),
model AS (
    SELECT l.switch_set, sum(k.layers * l.total) AS model_total
    FROM layer AS l JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version, kind)
    GROUP BY l.switch_set
)
SELECT l.switch_set, l.kind, k.layers, l.attention, l.ffn, l.norm, l.total, m.model_total
FROM layer AS l
JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version, kind)
JOIN model AS m USING (switch_set)
ORDER BY l.n_recomputed NULLS LAST, l.mask, l.kind;
