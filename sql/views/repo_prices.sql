-- View repo_prices: whole-model bytes of every repo at every setting, for every switch set
-- plus full recompute (switch_set 'full', mask NULL), at the latest night's census and
-- records versions. Per rank, for one micro-batch (model_prices, model_full_prices).
-- Filter on config_hash, setting_id or mask with constants (or getvariable) to have the scan
-- of the prices skip what is not asked; a filter on repo_id alone cannot be pushed into it.
-- Grain: one row per (repo_id, setting_id, switch set).
-- Columns:
--   repo_id              id      the Hub repo
--   downloads            count   the Hub's download count, as last listed
--   likes                count   the Hub's likes, as last listed
--   config_hash          id      the repo's config
--   stack                code    the training stack priced (the settings table's fields follow)
--   seq_length           tokens  the setting's sequence length
--   micro_batch          count   sequences per micro-batch
--   tp                   count   tensor-parallel ranks
--   cp                   count   context-parallel ranks
--   sequence_parallel    flag    sequence parallelism with tensor parallelism
--   flash_attention      flag    a fused attention kernel (no saved scores)
--   cp_algo              code    the context-parallel algorithm: ring or ulysses
--   dtype                code    the compute dtype
--   in_flight            count   micro-batches in flight at once
--   param_casts          flag    casts of parameters are kept for backward
--   grouped_gemm         flag    MoE experts run as one grouped GEMM
--   dropless_tok_factor  ratio   MoE tokens per expert against the even share, when dropless
--   capacity_factor      ratio   MoE expert capacity against the even share, otherwise
--   setting_id           id      the setting
--   mask                 id      the switch set (switch_sets); NULL for full recompute
--   switch_set           text    the switch set's name: none, all, switches joined by commas, or full
--   n_recomputed         count   switches recomputed (NULL for full recompute)
--   attention            bytes   kept by the attention blocks (NULL for full recompute)
--   ffn                  bytes   kept by the feed-forward blocks (NULL for full recompute)
--   norm                 bytes   kept by the normalisations (NULL for full recompute)
--   total                bytes   kept by the whole model
CREATE OR REPLACE VIEW repo_prices AS
WITH priced AS (
    SELECT m.config_hash, m.census_version, m.transformers_version, m.torch_version, m.records_version, m.setting_id, m.mask,
           w.name AS switch_set, w.n_recomputed, m.attention, m.ffn, m.norm, m.total
    FROM model_prices AS m JOIN switch_sets AS w USING (mask)
    UNION ALL
    SELECT f.config_hash, f.census_version, f.transformers_version, f.torch_version, f.records_version, f.setting_id, NULL, 'full', NULL,
           NULL, NULL, NULL, f.total
    FROM model_full_prices AS f
)
SELECT r.repo_id, r.downloads, r.likes, r.config_hash,
       s.* EXCLUDE (setting_id), p.setting_id, p.mask, p.switch_set, p.n_recomputed,
       p.attention, p.ffn, p.norm, p.total
FROM repos AS r
JOIN priced AS p ON p.config_hash = r.config_hash
JOIN latest_run AS v ON v.census_version = p.census_version AND v.transformers_version = p.transformers_version AND v.torch_version = p.torch_version AND v.records_version = p.records_version
JOIN settings AS s ON s.setting_id = p.setting_id;
