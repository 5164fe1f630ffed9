-- View planner_layer_prices: the planners' question in one SELECT with no join: the bytes one
-- layer of each kind keeps, for every repo at the latest versions, every setting (as readable
-- columns, the stack among them, and as one label) and every switch set (by name), beside the
-- bytes under full recompute. A quantity's unit is in its column's name. Two rows of a repo,
-- kind and switch set differ in some readable setting column, never in setting_id alone.
-- Grain: one row per repo, kind, setting and switch set, at the latest night's versions.
-- Columns:
--   repo_id               id       the Hub repo
--   config_hash           id       the repo's config
--   census_version        version  the spec's census version: the latest night's
--   transformers_version  version  the transformers package that measured the spec (the latest night's)
--   torch_version         version  the torch package that measured the spec (the latest night's)
--   records_version       version  the prices' records version: the latest night's
--   kind                  code     the layer kind
--   layers_count          count    layers of this kind in the stack
--   setting_id            id       the setting (a hash of its fields)
--   setting_label         text     every field of the setting as field=value (view setting_labels)
--   stack                 code     the training stack priced: transformers or megatron
--   seq_length_tokens     tokens   sequence length
--   micro_batch_count     count    sequences per micro-batch
--   tp_ranks              count    tensor-parallel ranks
--   cp_ranks              count    context-parallel ranks
--   sequence_parallel     flag     sequence parallelism on
--   flash_attention       flag     a flash attention kernel
--   cp_algo               code     context-parallel algorithm (ring or ulysses)
--   dtype                 code     compute dtype
--   in_flight_count       count    micro-batches in flight the bytes are for
--   param_casts           flag     casts of parameters are kept for backward
--   grouped_gemm          flag     MoE experts run as one grouped GEMM
--   dropless_tok_factor   ratio    MoE tokens per expert against the even share, when dropless
--   capacity_factor       ratio    MoE expert capacity against the even share, otherwise
--   mask                  id       the switch set (bit i: switch i recomputed)
--   switch_set            code     the switch set's name: none, all, or the recomputed switches joined by commas
--   n_recomputed_count    count    switches recomputed
--   attention_bytes       bytes    what one layer's attention keeps, per rank
--   ffn_bytes             bytes    what one layer's MLP or experts keep, per rank
--   norm_bytes            bytes    what one layer's norms keep, per rank
--   total_bytes           bytes    what one layer keeps, per rank (attention + ffn + norm)
--   full_recompute_bytes  bytes    what one layer keeps under full recompute, per rank
CREATE OR REPLACE VIEW planner_layer_prices AS
SELECT r.repo_id, p.config_hash, p.census_version, p.transformers_version, p.torch_version, p.records_version, p.kind, k.layers AS layers_count,
       p.setting_id, l.setting_label, s.stack, s.seq_length AS seq_length_tokens, s.micro_batch AS micro_batch_count,
       s.tp AS tp_ranks, s.cp AS cp_ranks, s.sequence_parallel, s.flash_attention, s.cp_algo, s.dtype,
       s.in_flight AS in_flight_count, s.param_casts, s.grouped_gemm, s.dropless_tok_factor, s.capacity_factor, p.mask, w.name AS switch_set, w.n_recomputed AS n_recomputed_count,
       p.attention AS attention_bytes, p.ffn AS ffn_bytes, p.norm AS norm_bytes, p.total AS total_bytes,
       f.kept AS full_recompute_bytes
FROM repos AS r
JOIN latest_run AS v ON true
JOIN layer_prices AS p ON p.config_hash = r.config_hash AND p.census_version = v.census_version AND p.transformers_version = v.transformers_version AND p.torch_version = v.torch_version
                      AND p.records_version = v.records_version
JOIN kinds AS k ON k.config_hash = p.config_hash AND k.census_version = p.census_version AND k.transformers_version = p.transformers_version AND k.torch_version = p.torch_version AND k.kind = p.kind
JOIN full_prices AS f ON f.config_hash = p.config_hash AND f.census_version = p.census_version AND f.transformers_version = p.transformers_version AND f.torch_version = p.torch_version
                     AND f.records_version = p.records_version AND f.kind = p.kind AND f.setting_id = p.setting_id
JOIN switch_sets AS w ON w.mask = p.mask
JOIN settings AS s ON s.setting_id = p.setting_id
JOIN setting_labels AS l ON l.setting_id = p.setting_id;
