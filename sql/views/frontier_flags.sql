-- View frontier_flags: flags, not bitmasks. For every row of the view frontier (a repo, kind,
-- setting and frontier class at the latest versions), what asks a training framework for that
-- class: the flag sets of flag_sets (catalogue/records/flags.yaml) for the setting's stack whose
-- switch set is a member of the class (the same bytes in every part and the same costs), and
-- the records' ops a torch selective-checkpoint policy recomputes to give it (switch_ops: the
-- ops whose saves the set drops; torch.utils.checkpoint with create_selective_checkpoint_contexts,
-- MUST_RECOMPUTE for the calls that make those saves, as the census measures each set:
-- docs/census.md). `no_framework` marks the classes no framework's flags give. Filter on
-- repo_id and setting_id with constants for a fast scan.
-- Grain: one row per row of the view frontier.
-- Columns:
--   repo_id                id       the Hub repo
--   kind                   code     the layer kind
--   setting_id             id       the setting
--   stack                  code     the training stack priced: transformers or megatron
--   seq_length_tokens      tokens   sequence length
--   tp_ranks               count    tensor-parallel ranks
--   cp_ranks               count    context-parallel ranks
--   mask                   id       the class's representative switch set; -1 for full recompute
--   switch_set             code     its name: none, all, the recomputed switches joined by commas, or full
--   equivalents            list     the names of the sets in the class
--   kept_bytes             bytes    what one layer keeps for backward, per rank
--   saved_pct              percent  1 - kept_bytes over mask 0's bytes, in per cent
--   overhead_pct           percent  recompute FLOPs over the layer's step FLOPs, in per cent
--   flags                  list     each framework's way to ask for the class: {framework, flags, command}
--   no_framework           flag     no framework's flags give the class
--   torch_recompute_ops    list     the records' ops a torch selective-checkpoint policy recomputes for it (none for mask 0)
CREATE OR REPLACE VIEW frontier_flags AS
WITH front AS MATERIALIZED (SELECT * FROM frontier),
given AS (  -- each class's flag sets: those whose switch set is a member of the class
    SELECT f.repo_id, f.kind, f.setting_id, f.mask,
           list({'framework': x.framework, 'flags': x.flags, 'command': x.command} ORDER BY x.framework, len(x.flags)) AS flags
    FROM front AS f
    JOIN switch_costs AS c ON c.config_hash = f.config_hash AND c.census_version = f.census_version
                          AND c.transformers_version = f.transformers_version AND c.torch_version = f.torch_version
                          AND c.records_version = f.records_version AND c.kind = f.kind AND c.setting_id = f.setting_id
                          AND c.representative = f.mask
    JOIN flag_sets AS x ON x.mask = c.mask AND x.stack = f.stack
    GROUP BY ALL
)
SELECT f.repo_id, f.kind, f.setting_id, f.stack, f.seq_length_tokens, f.tp_ranks, f.cp_ranks, f.mask, f.switch_set, f.equivalents,
       f.kept_bytes, f.saved_pct, f.overhead_pct, coalesce(g.flags, []) AS flags, g.flags IS NULL AS no_framework,
       coalesce((SELECT list(o.op ORDER BY o.op) FROM switch_ops AS o WHERE o.mask = f.mask AND f.mask <> 0), []) AS torch_recompute_ops
FROM front AS f
LEFT JOIN given AS g ON g.repo_id = f.repo_id AND g.kind = f.kind AND g.setting_id = f.setting_id AND g.mask = f.mask;
