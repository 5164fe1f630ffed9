-- Report query parts: where one layer's bytes go, by part, for the switch sets the report
-- draws (the relation report_sets the report registers: repo_id and mask, from the query
-- frontier) at the variable setting_id, from the view planner_layer_prices; full recompute is
-- its full_recompute_bytes column.
-- Grain: one row per (repo_id, kind, switch set) of report_sets at the setting.
-- Columns:
--   repo_id               id     the Hub repo
--   kind                  code   the layer kind
--   layers_count          count  layers of the kind
--   mask                  id     the switch set
--   switch_set            code   its name
--   attention_bytes       bytes  kept by the attention block of one layer, per rank
--   ffn_bytes             bytes  kept by the feed-forward block
--   norm_bytes            bytes  kept by the normalisations
--   total_bytes           bytes  the layer's whole
--   full_recompute_bytes  bytes  what the layer keeps under full recompute
SELECT p.repo_id, p.kind, p.layers_count, p.mask, p.switch_set,
       p.attention_bytes, p.ffn_bytes, p.norm_bytes, p.total_bytes, p.full_recompute_bytes
FROM planner_layer_prices AS p
SEMI JOIN report_sets AS w ON w.repo_id = p.repo_id AND w.mask = p.mask
WHERE p.setting_id = getvariable('setting_id')
ORDER BY p.repo_id, p.kind, p.total_bytes DESC;
