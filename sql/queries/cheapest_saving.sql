-- For one repo, each layer kind and each setting: the switch set (or full recompute) that saves
-- at least a share of the bytes one layer keeps without recompute at the least recompute cost,
-- at the latest versions. The cost is the recompute FLOPs, then the bytes those ops move, then
-- the bytes kept (the catalogue holds no accelerator: `speccat fit` ranks by estimated seconds);
-- ties go to the lowest mask, full recompute last. Such a point is never dominated, so it is a
-- row of the view frontier, the class's representative, with the sets it stands for.
-- A kind and setting where nothing saves that much has no row.
-- Parameters: repo_id (required); at_least_pct [50]: the least saving, in per cent of mask 0's
--   bytes; stack, seq_length, micro_batch, tp, cp [the grid's defaults: the table
--   setting_defaults, through the view chosen_settings].
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));
SET VARIABLE _setting_ids = coalesce(
    (SELECT list(setting_id) FROM chosen_settings),
    error('no setting of the grid has that seq_length, micro_batch, tp and cp'));

SELECT setting_id, kind, layers_count, mask, switch_set, n_equivalent_count, equivalents,
       kept_bytes, round(kept_bytes / 2 ** 30, 3) AS kept_gib, saved_bytes, round(saved_pct, 2) AS saved_pct,
       recompute_flops, recompute_moved_bytes, round(overhead_pct, 2) AS overhead_pct
FROM frontier
WHERE config_hash = getvariable('_config_hash') AND list_contains(getvariable('_setting_ids'), setting_id)
  AND repo_id = getvariable('repo_id')
  AND saved_pct >= coalesce(getvariable('at_least_pct'), 50)
QUALIFY row_number() OVER (PARTITION BY setting_id, kind
                           ORDER BY recompute_flops, recompute_moved_bytes, kept_bytes, mask = -1, mask) = 1
ORDER BY setting_id, kind;
