-- One repo's switch sets ranked by the whole-model bytes they keep at one setting, least
-- first, with what each saves against no recompute, at the latest versions.
-- Parameters: repo_id (required); seq_length, micro_batch, tp, cp [the grid's defaults: the
--   table setting_defaults, through the view chosen_settings].
-- The repo's config, the setting and the versions are looked up first, as constants for the scan.
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));
SET VARIABLE _census_version = (SELECT census_version FROM latest_run);
SET VARIABLE _records_version = (SELECT records_version FROM latest_run);
SET VARIABLE _setting_ids = coalesce(
    (SELECT list(setting_id) FROM chosen_settings),
    error('no setting of the grid has that seq_length, micro_batch, tp and cp'));

WITH priced AS (
    SELECT m.setting_id, m.mask, w.name AS switch_set, w.n_recomputed, m.total
    FROM model_prices AS m JOIN switch_sets AS w USING (mask)
    WHERE m.config_hash = getvariable('_config_hash') AND m.census_version = getvariable('_census_version')
      AND m.records_version = getvariable('_records_version')
      AND list_contains(getvariable('_setting_ids'), m.setting_id)
)
SELECT p.setting_id,
       rank() OVER (PARTITION BY p.setting_id ORDER BY p.total, p.n_recomputed) AS rank,
       p.mask, p.switch_set, p.n_recomputed, p.total, round(p.total / 2 ** 30, 3) AS total_gib,
       z.total - p.total AS saved
FROM priced AS p JOIN priced AS z ON z.setting_id = p.setting_id AND z.mask = 0
ORDER BY p.setting_id, rank, p.mask;
