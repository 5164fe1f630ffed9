-- Whole-model activation bytes of one repo per setting and switch set (every mask, plus
-- full recompute as switch_set 'full'), per rank for one micro-batch.
-- Parameters: repo_id (required); seq_length, micro_batch, tp, cp narrow the settings.
-- The repo's config is looked up first, so the scan of the prices reads that config's rows only.
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));

SELECT seq_length, micro_batch, tp, cp, mask, switch_set, n_recomputed,
       attention, ffn, norm, total, round(total / 2 ** 30, 3) AS total_gib
FROM repo_prices
WHERE config_hash = getvariable('_config_hash') AND repo_id = getvariable('repo_id')
  AND (getvariable('seq_length') IS NULL OR seq_length = getvariable('seq_length'))
  AND (getvariable('micro_batch') IS NULL OR micro_batch = getvariable('micro_batch'))
  AND (getvariable('tp') IS NULL OR tp = getvariable('tp'))
  AND (getvariable('cp') IS NULL OR cp = getvariable('cp'))
ORDER BY seq_length, micro_batch, tp, cp, mask NULLS LAST;
