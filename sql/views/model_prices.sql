-- View model_prices: whole-model bytes under one switch set, with the same mask for every
-- layer: the sum over the stack's kinds of (layers of the kind) x (bytes of one layer). Per
-- rank, for one micro-batch (in_flight of them where the setting says so, docs/pricing.md).
-- Covers every census and records version and every library stored.
-- Grain: one row per (config_hash, census_version, transformers_version, torch_version, records_version, setting_id, mask).
-- Columns:
--   config_hash      id       the config
--   census_version   version  the spec's census version
--   transformers_version  version  the transformers package that measured the spec
--   torch_version    version  the torch package that measured the spec
--   records_version  version  the prices' records version
--   setting_id       id       the setting (settings)
--   mask             id       the switch set (switch_sets): bit i set = switch i recomputed
--   attention        bytes    kept by the attention blocks of the whole model
--   ffn              bytes    kept by the feed-forward blocks
--   norm             bytes    kept by the normalisations
--   total            bytes    kept by the whole model: attention + ffn + norm
CREATE OR REPLACE VIEW model_prices AS
SELECT p.config_hash, p.census_version, p.transformers_version, p.torch_version, p.records_version, p.setting_id, p.mask,
       sum(k.layers * p.attention) AS attention,
       sum(k.layers * p.ffn) AS ffn,
       sum(k.layers * p.norm) AS norm,
       sum(k.layers * p.total) AS total
FROM layer_prices AS p
JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version, kind)
GROUP BY p.config_hash, p.census_version, p.transformers_version, p.torch_version, p.records_version, p.setting_id, p.mask;
