-- View model_costs: what re-running a switch set's ops costs in the whole model, the same mask
-- for every layer: the sum over the stack's kinds of (layers of the kind) x (one layer's
-- switch_costs). Per rank, for one micro-batch. mask -1 is full recompute (the model's forward).
-- Covers every census and records version and every library stored.
-- Grain: one row per (config_hash, census_version, transformers_version, torch_version, records_version, setting_id, mask).
-- Columns:
--   config_hash            id       the config
--   census_version         version  the spec's census version
--   transformers_version   version  the transformers package that measured the spec
--   torch_version          version  the torch package that measured the spec
--   records_version        version  the prices' records version
--   setting_id             id       the setting (settings)
--   mask                   id       the switch set (switch_sets), or -1 for full recompute
--   recompute_flops        flops    forward FLOPs the set re-runs in the whole model
--   recompute_moved_bytes  bytes    bytes those ops read and write
--   step_flops             flops    the whole model's forward + backward FLOPs of its layers, without recompute
CREATE OR REPLACE VIEW model_costs AS
SELECT c.config_hash, c.census_version, c.transformers_version, c.torch_version, c.records_version, c.setting_id, c.mask,
       sum(k.layers * c.recompute_flops) AS recompute_flops,
       sum(k.layers * c.recompute_bytes) AS recompute_moved_bytes,
       sum(k.layers * c.step_flops) AS step_flops
FROM switch_costs AS c
JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version, kind)
GROUP BY c.config_hash, c.census_version, c.transformers_version, c.torch_version, c.records_version, c.setting_id, c.mask;
