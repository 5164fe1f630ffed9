-- View spec_op_prices: where one layer's bytes go, op by op, at the settings of the memory curve
-- (settings.yaml `curve`: the grid's lengths and longer and shorter ones, at tp 1 and 8, each
-- stack): for every config at the latest versions, every kind, setting and switch set, the bytes
-- each op and part of the records keeps (0 for an op the set recomputes), beside the layer's
-- bytes under full recompute. Per rank and micro-batch, one layer. A set's rows add up to the
-- layer's price (layer_prices.total where the setting is also the grid's). Filter on
-- setting_id and mask to have the scan read only those. repo_op_prices is this for each repo:
-- a query over many repos sharing a config reads this once per config and joins the repos after.
-- Grain: one row per config, kind, setting, switch set, part and op, at the latest night's versions.
-- Columns:
--   config_hash           id       the config
--   kind                  code     the layer kind
--   layers_count          count    layers of this kind in the stack
--   setting_id            id       the setting (a hash of its fields)
--   stack                 code     the training stack priced: transformers or megatron
--   seq_length_tokens     tokens   sequence length
--   tp_ranks              count    tensor-parallel ranks
--   cp_ranks              count    context-parallel ranks
--   mask                  id       the switch set (bit i: switch i recomputed)
--   switch_set            code     its name: none, all, or the recomputed switches joined by commas
--   part                  code     the layer's part the bytes are in: attention, ffn or norm
--   op                    code     an op or part of the records (records.yaml)
--   kept_bytes            bytes    what the op keeps under the switch set, one layer, per rank
--   full_recompute_bytes  bytes    what the layer keeps under full recompute, per rank
CREATE OR REPLACE VIEW spec_op_prices AS
SELECT o.config_hash, o.kind, n.layers AS layers_count, o.setting_id, s.stack, s.seq_length AS seq_length_tokens,
       s.tp AS tp_ranks, s.cp AS cp_ranks, w.mask, w.name AS switch_set, o.part, o.op,
       CASE WHEN k.op IS NULL THEN 0.0 ELSE o.kept_bytes END AS kept_bytes, o.full_bytes AS full_recompute_bytes
FROM op_prices AS o
JOIN latest_run AS v ON o.census_version = v.census_version AND o.transformers_version = v.transformers_version AND o.torch_version = v.torch_version
                    AND o.records_version = v.records_version
JOIN kinds AS n ON n.config_hash = o.config_hash AND n.census_version = o.census_version AND n.transformers_version = o.transformers_version
               AND n.torch_version = o.torch_version AND n.kind = o.kind
JOIN settings AS s ON s.setting_id = o.setting_id
CROSS JOIN switch_sets AS w
LEFT JOIN switch_kept AS k ON k.mask = w.mask AND k.op = o.op;
