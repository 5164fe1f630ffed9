-- Report query memory: the whole layer stack's bytes per rank at every setting of the memory curve
-- (the settings repo_curve holds) for the switch sets the report draws (the relation report_sets:
-- repo_id and mask, the frontier's sets; mask -1 is full recompute), from the view repo_curve.
-- The variable masks lists every mask report_sets holds: a filter on the view's mask, unlike
-- the semi join, reaches the view's scan of switch_sets, so only those sets are added up.
-- Grain: one row per (repo_id, switch set) of report_sets and setting.
-- Columns:
--   repo_id     id      the Hub repo
--   stack       code    the training stack priced
--   seq_length  tokens  the setting's sequence length
--   tp          count   tensor-parallel ranks
--   cp          count   context-parallel ranks
--   mask        id      the switch set; -1 for full recompute
--   switch_set  code    its name (full for full recompute)
--   total       bytes   kept by the whole layer stack, per rank, one micro-batch
SELECT c.repo_id, c.stack, c.seq_length_tokens AS seq_length, c.tp_ranks AS tp, c.cp_ranks AS cp, coalesce(c.mask, -1) AS mask,
       c.switch_set, c.total_bytes AS total
FROM repo_curve AS c
SEMI JOIN report_sets AS w ON w.repo_id = c.repo_id AND w.mask = coalesce(c.mask, -1)
WHERE list_contains(getvariable('masks'), coalesce(c.mask, -1))
ORDER BY c.repo_id, c.stack, c.seq_length_tokens, c.tp_ranks, c.cp_ranks, c.total_bytes DESC;
