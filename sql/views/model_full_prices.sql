-- View model_full_prices: whole-model bytes under full recompute, where every layer keeps only
-- its input. Per rank, for one micro-batch, as model_prices. Covers every version stored.
-- Grain: one row per (config_hash, census_version, transformers_version, torch_version, records_version, setting_id).
-- Columns:
--   config_hash      id       the config
--   census_version   version  the spec's census version
--   transformers_version  version  the transformers package that measured the spec
--   torch_version    version  the torch package that measured the spec
--   records_version  version  the prices' records version
--   setting_id       id       the setting (settings)
--   total            bytes    kept by the whole model: the sum of layers x kept
CREATE OR REPLACE VIEW model_full_prices AS
SELECT f.config_hash, f.census_version, f.transformers_version, f.torch_version, f.records_version, f.setting_id,
       sum(k.layers * f.kept) AS total
FROM full_prices AS f
JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version, kind)
GROUP BY f.config_hash, f.census_version, f.transformers_version, f.torch_version, f.records_version, f.setting_id;
