-- View switch_classes: for every repo at the latest versions, every kind and every setting,
-- every class of equivalent switch sets (same bytes in every part, same costs), full recompute
-- included as a class of its own: its representative, the lowest mask, the names of the sets it
-- stands for, the bytes one layer keeps, what re-running its ops costs, and whether it is on the
-- frontier (switch_costs.on_frontier). Per rank and micro-batch, one layer; a quantity's unit is
-- in its column's name. The view frontier is its rows on the frontier. Ordered by nothing.
-- Grain: one row per repo, kind, setting and class of equivalent switch sets, at the latest
-- night's versions.
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
--   on_frontier            flag     no other class, full recompute included, keeps no more bytes at no more recompute FLOPs and bytes moved, and less of one
CREATE OR REPLACE VIEW switch_classes AS
WITH class AS (  -- each class's representative: its costs and its place on the frontier
    SELECT c.* FROM switch_costs AS c
    JOIN latest_run AS v ON c.census_version = v.census_version AND c.transformers_version = v.transformers_version AND c.torch_version = v.torch_version AND c.records_version = v.records_version
    WHERE c.representative = c.mask
),
members AS (  -- every switch set of a class; full recompute (mask -1) is no switch set and a class of its own
    SELECT e.config_hash, e.census_version, e.transformers_version, e.torch_version, e.records_version, e.kind, e.setting_id, e.representative AS mask,
           count(*) AS n_equivalent, list(w.name ORDER BY w.n_recomputed, w.mask) AS equivalents
    FROM switch_costs AS e
    JOIN latest_run AS v ON e.census_version = v.census_version AND e.transformers_version = v.transformers_version AND e.torch_version = v.torch_version AND e.records_version = v.records_version
    JOIN switch_sets AS w ON w.mask = e.mask
    WHERE e.mask >= 0
    GROUP BY ALL
),
kept AS (
    SELECT f.*, coalesce(p.total, x.kept) AS kept, z.total AS baseline,
           coalesce(c.n_equivalent, 1) AS n_equivalent, coalesce(c.equivalents, ['full']) AS equivalents
    FROM class AS f
    JOIN full_prices AS x ON x.config_hash = f.config_hash AND x.census_version = f.census_version AND x.transformers_version = f.transformers_version AND x.torch_version = f.torch_version
                         AND x.records_version = f.records_version AND x.kind = f.kind AND x.setting_id = f.setting_id
    JOIN layer_prices AS z ON z.config_hash = f.config_hash AND z.census_version = f.census_version AND z.transformers_version = f.transformers_version AND z.torch_version = f.torch_version
                          AND z.records_version = f.records_version AND z.kind = f.kind
                          AND z.setting_id = f.setting_id AND z.mask = 0
    LEFT JOIN layer_prices AS p ON p.config_hash = f.config_hash AND p.census_version = f.census_version AND p.transformers_version = f.transformers_version AND p.torch_version = f.torch_version
                               AND p.records_version = f.records_version AND p.kind = f.kind
                               AND p.setting_id = f.setting_id AND p.mask = f.mask
    LEFT JOIN members AS c ON c.config_hash = f.config_hash AND c.census_version = f.census_version AND c.transformers_version = f.transformers_version AND c.torch_version = f.torch_version
                          AND c.records_version = f.records_version AND c.kind = f.kind
                          AND c.setting_id = f.setting_id AND c.mask = f.mask
)
SELECT r.repo_id, k.config_hash, k.census_version, k.transformers_version, k.torch_version, k.records_version, k.kind, n.layers AS layers_count,
       k.setting_id, s.stack, s.seq_length AS seq_length_tokens, s.micro_batch AS micro_batch_count,
       s.tp AS tp_ranks, s.cp AS cp_ranks, s.sequence_parallel, s.flash_attention, s.cp_algo, s.dtype,
       s.in_flight AS in_flight_count, s.dropless_tok_factor, k.mask, coalesce(w.name, 'full') AS switch_set,
       w.n_recomputed AS n_recomputed_count, k.n_equivalent AS n_equivalent_count, k.equivalents,
       k.kept AS kept_bytes, k.baseline - k.kept AS saved_bytes,
       100 * (1 - k.kept / nullif(k.baseline, 0)) AS saved_pct,
       k.recompute_flops, k.recompute_bytes AS recompute_moved_bytes, k.step_flops,
       100 * k.recompute_flops / nullif(k.step_flops, 0) AS overhead_pct,
       k.on_frontier
FROM kept AS k
JOIN repos AS r ON r.config_hash = k.config_hash
JOIN kinds AS n ON n.config_hash = k.config_hash AND n.census_version = k.census_version AND n.transformers_version = k.transformers_version AND n.torch_version = k.torch_version AND n.kind = k.kind
JOIN settings AS s ON s.setting_id = k.setting_id
LEFT JOIN switch_sets AS w ON w.mask = k.mask;
