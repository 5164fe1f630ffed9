-- For one repo, each layer kind and each setting: the switch set (or full recompute) that saves
-- at least a share of the bytes one layer keeps without recompute at the least recompute cost,
-- at the latest versions. The cost is the estimated time on an accelerator (per op re-run, the
-- slower of its FLOPs at the accelerator's peak and its bytes at its bandwidth: op_costs,
-- switch_ops, accelerators, the seconds `speccat fit` estimates), then the recompute FLOPs,
-- then the bytes kept; ties go to the lowest mask, full recompute (mask -1) last. This query is
-- the rule's one statement (docs/planning.md).
-- The point is a class's representative, shown with the sets it stands for. A kind and setting
-- where nothing saves that much has no row.
-- Parameters: repo_id (required); at_least_pct [50]: the least saving, in per cent of mask 0's
--   bytes; accelerator [the accelerators table's default]; stack, seq_length, micro_batch, tp,
--   cp, dropless_tok_factor [the grid's defaults: the table setting_defaults, through the view
--   chosen_settings].
-- The repo's config, the setting and the versions are looked up first, as constants for the scans.
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));
SET VARIABLE _census_version = (SELECT census_version FROM latest_run);
SET VARIABLE _transformers_version = (SELECT transformers_version FROM latest_run);
SET VARIABLE _torch_version = (SELECT torch_version FROM latest_run);
SET VARIABLE _records_version = (SELECT records_version FROM latest_run);
SET VARIABLE _accelerator = coalesce(
    (SELECT accelerator FROM accelerators
     WHERE accelerator = coalesce(getvariable('accelerator'), (SELECT accelerator FROM accelerators WHERE default_accelerator))),
    error('accelerator ' || coalesce(getvariable('accelerator'), '(not set)') || ' is not in the accelerators table'));
SET VARIABLE _setting_ids = coalesce(
    (SELECT list(setting_id) FROM chosen_settings),
    error('no setting of the grid has that seq_length, micro_batch, tp, cp and dropless_tok_factor'));

WITH costs AS (
    SELECT kind, setting_id, mask, recompute_flops, recompute_bytes, step_flops, representative, on_frontier
    FROM switch_costs
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND transformers_version = getvariable('_transformers_version') AND torch_version = getvariable('_torch_version')
      AND records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), setting_id)
),
prices AS (
    SELECT kind, setting_id, mask, total FROM layer_prices
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND transformers_version = getvariable('_transformers_version') AND torch_version = getvariable('_torch_version')
      AND records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), setting_id)
),
fulls AS (
    SELECT kind, setting_id, kept FROM full_prices
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND transformers_version = getvariable('_transformers_version') AND torch_version = getvariable('_torch_version')
      AND records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), setting_id)
),
seconds AS (  -- per kind, setting and point: the estimated time of the ops it re-runs
    SELECT o.kind, o.setting_id, w.mask,
           sum(greatest(o.recompute_flops / a.peak_flops_per_s, o.recompute_bytes / a.bandwidth_bytes_per_s)) AS seconds
    FROM op_costs AS o JOIN switch_ops AS w USING (op)
    JOIN accelerators AS a ON a.accelerator = getvariable('_accelerator')
    WHERE o.config_hash = getvariable('_config_hash') AND o.census_version = getvariable('_census_version')
      AND o.transformers_version = getvariable('_transformers_version') AND o.torch_version = getvariable('_torch_version')
      AND o.records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), o.setting_id)
    GROUP BY ALL
),
points AS (
    SELECT c.kind, c.setting_id, c.mask, c.recompute_flops, c.recompute_bytes, c.step_flops,
           coalesce(s.seconds, 0) AS recompute_s, coalesce(p.total, f.kept) AS kept, z.total AS baseline
    FROM costs AS c
    JOIN fulls AS f ON f.kind = c.kind AND f.setting_id = c.setting_id
    JOIN prices AS z ON z.kind = c.kind AND z.setting_id = c.setting_id AND z.mask = 0
    LEFT JOIN prices AS p ON p.kind = c.kind AND p.setting_id = c.setting_id AND p.mask = c.mask
    LEFT JOIN seconds AS s ON s.kind = c.kind AND s.setting_id = c.setting_id AND s.mask = c.mask
    WHERE c.representative = c.mask
),
best AS (
    SELECT *, 100 * (1 - kept / nullif(baseline, 0)) AS saved_pct FROM points
    WHERE 100 * (1 - kept / nullif(baseline, 0)) >= coalesce(getvariable('at_least_pct'), 50)
    QUALIFY row_number() OVER (PARTITION BY setting_id, kind
                               ORDER BY recompute_s, recompute_flops, kept, mask = -1, mask) = 1
),
classes AS (
    SELECT c.kind, c.setting_id, c.representative AS mask, count(*) AS n_equivalent,
           list(w.name ORDER BY w.n_recomputed, w.mask) AS equivalents
    FROM costs AS c JOIN switch_sets AS w ON w.mask = c.mask
    JOIN best AS b ON b.kind = c.kind AND b.setting_id = c.setting_id AND b.mask = c.representative
    GROUP BY ALL
)
SELECT b.setting_id, l.setting_label, b.kind, k.layers AS layers_count, b.mask, coalesce(w.name, 'full') AS switch_set,
       coalesce(c.n_equivalent, 1) AS n_equivalent_count, coalesce(c.equivalents, ['full']) AS equivalents,
       b.kept AS kept_bytes, round(b.kept / 2 ** 30, 3) AS kept_gib, b.baseline - b.kept AS saved_bytes,
       round(b.saved_pct, 2) AS saved_pct, b.recompute_flops, b.recompute_bytes AS recompute_moved_bytes,
       round(100 * b.recompute_flops / nullif(b.step_flops, 0), 2) AS overhead_pct,
       getvariable('_accelerator') AS accelerator, b.recompute_s
FROM best AS b
JOIN kinds AS k ON k.config_hash = getvariable('_config_hash') AND k.census_version = getvariable('_census_version')
      AND k.transformers_version = getvariable('_transformers_version') AND k.torch_version = getvariable('_torch_version')
               AND k.kind = b.kind
LEFT JOIN switch_sets AS w ON w.mask = b.mask
LEFT JOIN classes AS c ON c.kind = b.kind AND c.setting_id = b.setting_id AND c.mask = b.mask
JOIN setting_labels AS l ON l.setting_id = b.setting_id
ORDER BY b.setting_id, b.kind;
