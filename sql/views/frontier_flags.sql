-- View frontier_flags: flags, not bitmasks. Every row and column of the view frontier (a repo,
-- kind, setting and frontier class at the latest versions) and what asks a training framework
-- for that class: the flag sets of flag_sets (catalogue/records/flags.yaml) for the setting's stack whose
-- switch set is a member of the class (the same bytes in every part and the same costs), and
-- the records' ops a torch selective-checkpoint policy recomputes to give it (switch_ops: the
-- ops whose saves the set drops; torch.utils.checkpoint with create_selective_checkpoint_contexts,
-- MUST_RECOMPUTE for the calls that make those saves, as the census measures each set:
-- docs/census.md). `no_framework` marks the classes no framework's flags give. Filter on
-- repo_id and setting_id with constants for a fast scan.
-- Grain: one row per row of the view frontier.
-- Columns:
--   repo_id                id       the Hub repo
--   config_hash            id       the repo's config
--   census_version         version  the spec's census version: the latest night's
--   transformers_version   version  the transformers package that measured the spec (the latest night's)
--   torch_version          version  the torch package that measured the spec (the latest night's)
--   records_version        version  the prices' records version: the latest night's
--   kind                   code     the layer kind
--   layers_count           count    layers of this kind in the stack
--   setting_id             id       the setting (a hash of its fields)
--   stack                  code     the training stack priced: transformers or megatron
--   seq_length_tokens      tokens   sequence length
--   micro_batch_count      count    sequences per micro-batch
--   tp_ranks               count    tensor-parallel ranks
--   cp_ranks               count    context-parallel ranks
--   sequence_parallel      flag     sequence parallelism on
--   flash_attention        flag     a flash attention kernel
--   cp_algo                code     context-parallel algorithm (ring or ulysses)
--   dtype                  code     compute dtype
--   in_flight_count        count    micro-batches in flight the bytes are for
--   dropless_tok_factor    ratio    MoE tokens per expert against the even share (settings.yaml `overload`: routed experts only)
--   mask                   id       the representative switch set (bit i: switch i recomputed); -1 for full recompute
--   switch_set             code     its name: none, all, the recomputed switches joined by commas, or full
--   n_recomputed_count     count    switches recomputed (NULL for full recompute)
--   n_equivalent_count     count    switch sets in the class (1 for full recompute)
--   equivalents            list     their names, fewest switches first
--   kept_bytes             bytes    what one layer keeps for backward, per rank
--   saved_bytes            bytes    what it saves against no recompute (mask 0)
--   saved_pct              percent  1 - kept_bytes over mask 0's bytes, in per cent
--   recompute_flops        flops    forward FLOPs of the ops re-run in backward
--   recompute_moved_bytes  bytes    bytes those ops read and write (element-wise ops)
--   step_flops             flops    the layer's forward + backward FLOPs without recompute
--   overhead_pct           percent  recompute_flops over step_flops, in per cent
--   flags                  list     each framework's way to ask for the class: {framework, flags, command}
--   no_framework           flag     no framework's flags give the class
--   torch_recompute_ops    list     the records' ops a torch selective-checkpoint policy recomputes for it (none for mask 0)
CREATE OR REPLACE VIEW frontier_flags AS
SELECT f.*, g.flags, len(g.flags) = 0 AS no_framework,
       coalesce((SELECT list(o.op ORDER BY o.op) FROM switch_ops AS o WHERE o.mask = f.mask AND f.mask <> 0), []) AS torch_recompute_ops
FROM frontier AS f,
LATERAL (  -- the class's flag sets: those whose switch set is a member of it
    SELECT coalesce(list({'framework': x.framework, 'flags': x.flags, 'command': x.command} ORDER BY x.framework, len(x.flags)), []) AS flags
    FROM switch_costs AS c JOIN flag_sets AS x ON x.mask = c.mask AND x.stack = f.stack
    WHERE c.config_hash = f.config_hash AND c.census_version = f.census_version AND c.transformers_version = f.transformers_version
      AND c.torch_version = f.torch_version AND c.records_version = f.records_version AND c.kind = f.kind
      AND c.setting_id = f.setting_id AND c.representative = f.mask
) AS g;
