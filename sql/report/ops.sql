-- Report query ops: where one layer's bytes go, op by op, for the switch sets the report draws
-- (the relation report_sets: repo_id and mask, from the query frontier) at the variable
-- setting_id (the transformers stack's default, a setting of the memory curve), from the view
-- repo_op_prices; full recompute is its full_recompute_bytes column. The variable masks lists
-- every mask report_sets holds (a filter the view's scan of switch_sets reads; query memory).
-- Grain: one row per (repo_id, kind, switch set, part, op) of report_sets at the setting.
-- Columns:
--   repo_id               id     the Hub repo
--   kind                  code   the layer kind
--   layers_count          count  layers of the kind
--   mask                  id     the switch set
--   switch_set            code   its name
--   part                  code   the layer's part: attention, ffn or norm
--   op                    code   the op or part of the records
--   kept_bytes            bytes  what the op keeps under the set, one layer, per rank
--   full_recompute_bytes  bytes  what the layer keeps under full recompute
SELECT p.repo_id, p.kind, p.layers_count, p.mask, p.switch_set, p.part, p.op, p.kept_bytes, p.full_recompute_bytes
FROM repo_op_prices AS p
SEMI JOIN report_sets AS w ON w.repo_id = p.repo_id AND w.mask = p.mask
WHERE p.setting_id = getvariable('setting_id') AND list_contains(getvariable('masks'), p.mask)
ORDER BY p.repo_id, p.kind, p.mask, p.part, p.op;
