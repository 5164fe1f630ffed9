-- For one repo, each layer kind and each setting: the switch set (or full recompute) that saves
-- at least a share of the bytes one layer keeps without recompute at the least recompute cost,
-- at the latest versions. The cost is the recompute FLOPs, then the bytes those ops move, then
-- the bytes kept (the catalogue holds no accelerator: `speccat fit` ranks by estimated seconds);
-- ties go to the lowest mask, full recompute (mask -1) last. Such a point is never dominated:
-- it is one of the view frontier's rows, a class's representative, shown with the sets it
-- stands for. A kind and setting where nothing saves that much has no row.
-- Parameters: repo_id (required); at_least_pct [50]: the least saving, in per cent of mask 0's
--   bytes; stack, seq_length, micro_batch, tp, cp [the grid's defaults: the table
--   setting_defaults, through the view chosen_settings].
-- The repo's config, the setting and the versions are looked up first, as constants for the scans.
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));
SET VARIABLE _census_version = (SELECT census_version FROM latest_run);
SET VARIABLE _records_version = (SELECT records_version FROM latest_run);
SET VARIABLE _setting_ids = coalesce(
    (SELECT list(setting_id) FROM chosen_settings),
    error('no setting of the grid has that seq_length, micro_batch, tp and cp'));

WITH costs AS (
    SELECT kind, setting_id, mask, recompute_flops, recompute_bytes, step_flops, representative, on_frontier
    FROM switch_costs
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), setting_id)
),
prices AS (
    SELECT kind, setting_id, mask, total FROM layer_prices
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), setting_id)
),
fulls AS (
    SELECT kind, setting_id, kept FROM full_prices
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND records_version = getvariable('_records_version') AND list_contains(getvariable('_setting_ids'), setting_id)
),
points AS (
    SELECT c.kind, c.setting_id, c.mask, c.recompute_flops, c.recompute_bytes, c.step_flops,
           coalesce(p.total, f.kept) AS kept, z.total AS baseline
    FROM costs AS c
    JOIN fulls AS f ON f.kind = c.kind AND f.setting_id = c.setting_id
    JOIN prices AS z ON z.kind = c.kind AND z.setting_id = c.setting_id AND z.mask = 0
    LEFT JOIN prices AS p ON p.kind = c.kind AND p.setting_id = c.setting_id AND p.mask = c.mask
    WHERE c.on_frontier AND c.representative = c.mask
),
best AS (
    SELECT *, 100 * (1 - kept / nullif(baseline, 0)) AS saved_pct FROM points
    WHERE 100 * (1 - kept / nullif(baseline, 0)) >= coalesce(getvariable('at_least_pct'), 50)
    QUALIFY row_number() OVER (PARTITION BY setting_id, kind
                               ORDER BY recompute_flops, recompute_bytes, kept, mask = -1, mask) = 1
),
classes AS (
    SELECT c.kind, c.setting_id, c.representative AS mask, count(*) AS n_equivalent,
           list(w.name ORDER BY w.n_recomputed, w.mask) AS equivalents
    FROM costs AS c JOIN switch_sets AS w ON w.mask = c.mask
    JOIN best AS b ON b.kind = c.kind AND b.setting_id = c.setting_id AND b.mask = c.representative
    GROUP BY ALL
)
SELECT b.setting_id, b.kind, k.layers AS layers_count, b.mask, coalesce(w.name, 'full') AS switch_set,
       coalesce(c.n_equivalent, 1) AS n_equivalent_count, coalesce(c.equivalents, ['full']) AS equivalents,
       b.kept AS kept_bytes, round(b.kept / 2 ** 30, 3) AS kept_gib, b.baseline - b.kept AS saved_bytes,
       round(b.saved_pct, 2) AS saved_pct, b.recompute_flops, b.recompute_bytes AS recompute_moved_bytes,
       round(100 * b.recompute_flops / nullif(b.step_flops, 0), 2) AS overhead_pct
FROM best AS b
JOIN kinds AS k ON k.config_hash = getvariable('_config_hash') AND k.census_version = getvariable('_census_version')
               AND k.kind = b.kind
LEFT JOIN switch_sets AS w ON w.mask = b.mask
LEFT JOIN classes AS c ON c.kind = b.kind AND c.setting_id = b.setting_id AND c.mask = b.mask
ORDER BY b.setting_id, b.kind;
