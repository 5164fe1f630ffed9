-- View repo_curve: the memory curve: whole-model bytes of the layer stack per rank against
-- sequence length, at the settings of settings.yaml `curve` (1,024 to 1,048,576 tokens, tp 1
-- and 8, each stack), for every switch set plus full recompute (switch_set 'full', mask NULL),
-- at the latest night's versions: per kind, the ops the set keeps (spec_op_prices) times its
-- layers, added up once per config and joined with its repos after (repos sharing a config are
-- many on the Hub). At a setting the grid also holds it equals repo_prices' total. Per rank, one
-- micro-batch. Filter on setting_id or mask to have the scan read only those.
-- Grain: one row per (repo_id, setting_id, switch set).
-- Columns:
--   repo_id            id      the Hub repo
--   config_hash        id      the repo's config
--   setting_id         id      the setting
--   stack              code    the training stack priced
--   seq_length_tokens  tokens  sequence length
--   tp_ranks           count   tensor-parallel ranks
--   cp_ranks           count   context-parallel ranks
--   mask               id      the switch set (switch_sets); NULL for full recompute
--   switch_set         code    its name: none, all, switches joined by commas, or full
--   total_bytes        bytes   kept by the whole layer stack, per rank
CREATE OR REPLACE VIEW repo_curve AS
WITH layers AS (
    SELECT config_hash, setting_id, stack, seq_length_tokens, tp_ranks, cp_ranks, kind, layers_count, mask, switch_set,
           sum(kept_bytes) AS kept, any_value(full_recompute_bytes) AS full_kept
    FROM spec_op_prices
    GROUP BY ALL
), curve AS (
    SELECT config_hash, setting_id, stack, seq_length_tokens, tp_ranks, cp_ranks, mask, switch_set, sum(layers_count * kept) AS total_bytes
    FROM layers GROUP BY ALL
    UNION ALL
    SELECT config_hash, setting_id, stack, seq_length_tokens, tp_ranks, cp_ranks, NULL, 'full', sum(layers_count * full_kept)
    FROM layers WHERE mask = 0 GROUP BY ALL
)
SELECT r.repo_id, c.*
FROM curve AS c
JOIN repos AS r USING (config_hash);
