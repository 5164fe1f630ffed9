-- Whole-model activation bytes of one repo per setting and switch set (every mask, plus
-- full recompute as switch_set 'full'), per rank for one micro-batch, at the latest versions.
-- Parameters: repo_id (required); stack, seq_length, micro_batch, tp, cp, dropless_tok_factor narrow
--   the settings (a repo with routed experts is priced at settings.yaml's `overload` factors too:
--   its rows at each are told apart by dropless_tok_factor).
-- The repo's config and the versions are looked up first: with them as constants the scan of
-- the prices reads that config's rows only.
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));
SET VARIABLE _census_version = (SELECT census_version FROM latest_run);
SET VARIABLE _transformers_version = (SELECT transformers_version FROM latest_run);
SET VARIABLE _torch_version = (SELECT torch_version FROM latest_run);
SET VARIABLE _records_version = (SELECT records_version FROM latest_run);

WITH m AS (
    SELECT setting_id, mask, attention, ffn, norm, total FROM model_prices
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND transformers_version = getvariable('_transformers_version') AND torch_version = getvariable('_torch_version')
      AND records_version = getvariable('_records_version')
    UNION ALL
    SELECT setting_id, NULL, NULL, NULL, NULL, total FROM model_full_prices
    WHERE config_hash = getvariable('_config_hash') AND census_version = getvariable('_census_version')
      AND transformers_version = getvariable('_transformers_version') AND torch_version = getvariable('_torch_version')
      AND records_version = getvariable('_records_version')
)
SELECT s.stack, s.seq_length, s.micro_batch, s.tp, s.cp, s.dropless_tok_factor, m.mask, coalesce(w.name, 'full') AS switch_set,
       w.n_recomputed, m.attention, m.ffn, m.norm, m.total, round(m.total / 2 ** 30, 3) AS total_gib
FROM m
JOIN settings AS s USING (setting_id)
LEFT JOIN switch_sets AS w USING (mask)
WHERE (getvariable('stack')::VARCHAR IS NULL OR s.stack = getvariable('stack')::VARCHAR)
  AND (getvariable('seq_length') IS NULL OR s.seq_length = getvariable('seq_length'))
  AND (getvariable('micro_batch') IS NULL OR s.micro_batch = getvariable('micro_batch'))
  AND (getvariable('tp') IS NULL OR s.tp = getvariable('tp'))
  AND (getvariable('cp') IS NULL OR s.cp = getvariable('cp'))
  AND (getvariable('dropless_tok_factor') IS NULL OR s.dropless_tok_factor = getvariable('dropless_tok_factor'))
ORDER BY s.stack DESC, s.seq_length, s.micro_batch, s.tp, s.cp, s.dropless_tok_factor, m.mask NULLS LAST;
