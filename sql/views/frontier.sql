-- View frontier: for every repo at the latest versions, every kind and every setting, the
-- switch sets no other set beats on both the bytes one layer keeps and what re-running its ops
-- costs (switch_costs.on_frontier), full recompute included, one row per class of equivalent
-- sets (same bytes in every part, same costs): its representative, the lowest mask, and the
-- names of the sets it stands for. Per rank and micro-batch, one layer; a quantity's unit is in
-- its column's name. Ordered by nothing: sort by kept_bytes (descending) to walk the frontier
-- from no recompute to full recompute.
-- Grain: one row per repo, kind, setting and frontier class, at the latest night's versions.
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
CREATE OR REPLACE VIEW frontier AS
WITH front AS (
    SELECT c.* FROM switch_costs AS c
    JOIN latest_run AS v ON c.census_version = v.census_version AND c.transformers_version = v.transformers_version AND c.torch_version = v.torch_version AND c.records_version = v.records_version
    WHERE c.on_frontier AND c.representative = c.mask
),
classes AS (  -- the members of a class are equal points, so each is on the frontier when its representative is
    SELECT e.config_hash, e.census_version, e.transformers_version, e.torch_version, e.records_version, e.kind, e.setting_id, e.representative AS mask,
           count(*) AS n_equivalent, list(w.name ORDER BY w.n_recomputed, w.mask) AS equivalents
    FROM switch_costs AS e
    JOIN latest_run AS v ON e.census_version = v.census_version AND e.transformers_version = v.transformers_version AND e.torch_version = v.torch_version AND e.records_version = v.records_version
    JOIN switch_sets AS w ON w.mask = e.mask
    WHERE e.on_frontier AND e.mask >= 0
    GROUP BY ALL
),
kept AS (
    SELECT f.*, coalesce(p.total, x.kept) AS kept, z.total AS baseline,
           coalesce(c.n_equivalent, 1) AS n_equivalent, coalesce(c.equivalents, ['full']) AS equivalents
    FROM front AS f
    JOIN full_prices AS x ON x.config_hash = f.config_hash AND x.census_version = f.census_version AND x.transformers_version = f.transformers_version AND x.torch_version = f.torch_version
                         AND x.records_version = f.records_version AND x.kind = f.kind AND x.setting_id = f.setting_id
    JOIN layer_prices AS z ON z.config_hash = f.config_hash AND z.census_version = f.census_version AND z.transformers_version = f.transformers_version AND z.torch_version = f.torch_version
                          AND z.records_version = f.records_version AND z.kind = f.kind
                          AND z.setting_id = f.setting_id AND z.mask = 0
    LEFT JOIN layer_prices AS p ON p.config_hash = f.config_hash AND p.census_version = f.census_version AND p.transformers_version = f.transformers_version AND p.torch_version = f.torch_version
                               AND p.records_version = f.records_version AND p.kind = f.kind
                               AND p.setting_id = f.setting_id AND p.mask = f.mask
    LEFT JOIN classes AS c ON c.config_hash = f.config_hash AND c.census_version = f.census_version AND c.transformers_version = f.transformers_version AND c.torch_version = f.torch_version
                          AND c.records_version = f.records_version AND c.kind = f.kind
                          AND c.setting_id = f.setting_id AND c.mask = f.mask
)
SELECT r.repo_id, k.config_hash, k.census_version, k.transformers_version, k.torch_version, k.records_version, k.kind, n.layers AS layers_count,
       k.setting_id, s.stack, s.seq_length AS seq_length_tokens, s.micro_batch AS micro_batch_count,
       s.tp AS tp_ranks, s.cp AS cp_ranks, s.sequence_parallel, s.flash_attention, s.cp_algo, s.dtype,
       s.in_flight AS in_flight_count, k.mask, coalesce(w.name, 'full') AS switch_set,
       w.n_recomputed AS n_recomputed_count, k.n_equivalent AS n_equivalent_count, k.equivalents,
       k.kept AS kept_bytes, k.baseline - k.kept AS saved_bytes,
       100 * (1 - k.kept / nullif(k.baseline, 0)) AS saved_pct,
       k.recompute_flops, k.recompute_bytes AS recompute_moved_bytes, k.step_flops,
       100 * k.recompute_flops / nullif(k.step_flops, 0) AS overhead_pct
FROM kept AS k
JOIN repos AS r ON r.config_hash = k.config_hash
JOIN kinds AS n ON n.config_hash = k.config_hash AND n.census_version = k.census_version AND n.transformers_version = k.transformers_version AND n.torch_version = k.torch_version AND n.kind = k.kind
JOIN settings AS s ON s.setting_id = k.setting_id
LEFT JOIN switch_sets AS w ON w.mask = k.mask;
