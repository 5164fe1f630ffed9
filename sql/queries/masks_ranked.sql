-- One repo's distinct switch sets ranked by the whole-model bytes they keep at one setting,
-- least first, with what each saves against no recompute (bytes and per cent) and what it costs:
-- the forward FLOPs it re-runs in the whole model, the bytes those ops move, and the FLOPs' share
-- of the model's forward + backward FLOPs (pct_overhead; switch_costs), at the latest versions. Sets that keep the same
-- bytes in every part and cost the same in every kind are one row: the representative with the
-- fewest switches (then the lowest mask), how many sets it stands for, and their names.
-- Parameters: repo_id (required); stack, seq_length, micro_batch, tp, cp, dropless_tok_factor [the
--   grid's defaults: the table setting_defaults, through the view chosen_settings; dropless_tok_factor
--   1.25, 1.5 or 2 asks for the routing skew settings.yaml's `overload` stores for routed experts].
-- The repo's config, the setting and the versions are looked up first, as constants for the scan.
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));
SET VARIABLE _census_version = (SELECT census_version FROM latest_run);
SET VARIABLE _transformers_version = (SELECT transformers_version FROM latest_run);
SET VARIABLE _torch_version = (SELECT torch_version FROM latest_run);
SET VARIABLE _records_version = (SELECT records_version FROM latest_run);
SET VARIABLE _setting_ids = coalesce(
    (SELECT list(setting_id) FROM chosen_settings),
    error('no setting of the grid has that seq_length, micro_batch, tp, cp and dropless_tok_factor'));

WITH costed AS (
    SELECT c.setting_id, c.mask,
           list(c.recompute_flops ORDER BY c.kind) AS flops_by_kind, list(c.recompute_bytes ORDER BY c.kind) AS moved_by_kind,
           sum(k.layers * c.recompute_flops) AS recompute_flops, sum(k.layers * c.recompute_bytes) AS recompute_moved_bytes,
           sum(k.layers * c.step_flops) AS step_flops
    FROM switch_costs AS c
    JOIN kinds AS k ON k.config_hash = c.config_hash AND k.census_version = c.census_version AND k.transformers_version = c.transformers_version AND k.torch_version = c.torch_version AND k.kind = c.kind
    WHERE c.config_hash = getvariable('_config_hash') AND c.census_version = getvariable('_census_version')
      AND c.transformers_version = getvariable('_transformers_version') AND c.torch_version = getvariable('_torch_version')
      AND c.records_version = getvariable('_records_version')
      AND list_contains(getvariable('_setting_ids'), c.setting_id) AND c.mask >= 0
    GROUP BY c.setting_id, c.mask
),
priced AS (
    SELECT m.setting_id, m.mask, w.name AS switch_set, w.n_recomputed, m.attention, m.ffn, m.norm, m.total,
           c.flops_by_kind, c.moved_by_kind, c.recompute_flops, c.recompute_moved_bytes, c.step_flops
    FROM model_prices AS m JOIN switch_sets AS w USING (mask)
    JOIN costed AS c ON c.setting_id = m.setting_id AND c.mask = m.mask
    WHERE m.config_hash = getvariable('_config_hash') AND m.census_version = getvariable('_census_version')
      AND m.transformers_version = getvariable('_transformers_version') AND m.torch_version = getvariable('_torch_version')
      AND m.records_version = getvariable('_records_version')
      AND list_contains(getvariable('_setting_ids'), m.setting_id)
),
classes AS (
    SELECT setting_id, total,
           arg_min(mask, n_recomputed * 65536 + mask) AS mask,
           min(n_recomputed) AS n_recomputed,
           count(*) AS n_equivalent,
           list(switch_set ORDER BY n_recomputed, mask) AS equivalents,
           any_value(recompute_flops) AS recompute_flops, any_value(recompute_moved_bytes) AS recompute_moved_bytes,
           any_value(step_flops) AS step_flops
    FROM priced
    GROUP BY setting_id, attention, ffn, norm, total, flops_by_kind, moved_by_kind
)
SELECT c.setting_id, l.setting_label,
       rank() OVER (PARTITION BY c.setting_id ORDER BY c.total, c.recompute_flops, c.recompute_moved_bytes, c.n_recomputed) AS rank,
       c.mask, w.name AS switch_set, c.n_recomputed, c.n_equivalent, c.equivalents,
       c.total, round(c.total / 2 ** 30, 3) AS total_gib,
       z.total - c.total AS saved, round(100 * (z.total - c.total) / z.total, 2) AS pct_saved,
       c.recompute_flops, c.recompute_moved_bytes, round(100 * c.recompute_flops / c.step_flops, 2) AS pct_overhead
FROM classes AS c
JOIN switch_sets AS w USING (mask)
JOIN priced AS z ON z.setting_id = c.setting_id AND z.mask = 0
JOIN setting_labels AS l ON l.setting_id = c.setting_id
ORDER BY c.setting_id, rank, c.mask;
