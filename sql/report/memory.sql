-- Report query memory: the whole layer stack's bytes per rank at the variable setting_id for
-- the switch sets the report draws (the relation report_sets: repo_id and mask, the frontier's
-- sets; mask -1 is full recompute), from the view repo_prices.
-- Grain: one row per (repo_id, switch set) of report_sets at the setting.
-- Columns:
--   repo_id     id      the Hub repo
--   stack       code    the training stack priced
--   seq_length  tokens  the setting's sequence length
--   tp          count   tensor-parallel ranks
--   cp          count   context-parallel ranks
--   mask        id      the switch set; -1 for full recompute
--   switch_set  code    its name (full for full recompute)
--   total       bytes   kept by the whole layer stack, per rank, one micro-batch
SELECT p.repo_id, p.stack, p.seq_length, p.tp, p.cp, coalesce(p.mask, -1) AS mask, p.switch_set, p.total
FROM repo_prices AS p
SEMI JOIN report_sets AS w ON w.repo_id = p.repo_id AND w.mask = coalesce(p.mask, -1)
WHERE p.setting_id = getvariable('setting_id')
ORDER BY p.repo_id, p.total DESC;
