-- View repo_op_prices: where one layer's bytes go, op by op, at the settings of the memory curve
-- (settings.yaml `curve`: the grid's lengths and longer and shorter ones, at tp 1 and 8, each
-- stack): for every repo at the latest versions, every kind, setting and switch set, the bytes
-- each op and part of the records keeps (0 for an op the set recomputes), beside the layer's
-- bytes under full recompute. Per rank and micro-batch, one layer. A set's rows add up to the
-- layer's price (layer_prices.total where the setting is also the grid's). Filter on
-- setting_id and mask to have the scan read only those. spec_op_prices joined with the repos.
-- Grain: one row per repo, kind, setting, switch set, part and op, at the latest night's versions.
-- Columns:
--   repo_id               id       the Hub repo
--   config_hash           id       the repo's config
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
CREATE OR REPLACE VIEW repo_op_prices AS
SELECT r.repo_id, o.*
FROM spec_op_prices AS o
JOIN repos AS r USING (config_hash);
