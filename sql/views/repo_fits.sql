-- View repo_fits: what fits, for every model at once: every repo at every setting and switch set
-- (full recompute included), at the latest versions, with its whole-model activations per rank
-- against a budget, and what the set costs. The budget is the variable budget_gib [80]
-- (SET VARIABLE budget_gib = 40). What it covers is what the catalogue stores: the layer
-- stack's activations on one rank holding every layer (no pipeline split), for the in-flight
-- micro-batches the setting says; not the model's ends (embedding output, logits and the loss
-- upcast), nor weights, gradients and optimizer states, nor pipeline or expert parallelism.
-- `speccat fit` adds those for one repo (docs/planning.md). Filter on setting_id or mask with
-- constants for a fast scan, as with repo_prices.
-- Grain: one row per (repo_id, setting_id, switch set), at the latest night's versions.
-- Columns:
--   repo_id                id       the Hub repo
--   downloads              count    the Hub's download count, as last listed
--   config_hash            id       the repo's config
--   setting_id             id       the setting
--   stack                  code     the training stack priced: transformers or megatron
--   seq_length             tokens   the setting's sequence length
--   micro_batch            count    sequences per micro-batch
--   tp                     count    tensor-parallel ranks
--   cp                     count    context-parallel ranks
--   in_flight              count    micro-batches in flight the bytes are for
--   dropless_tok_factor    ratio    MoE tokens per expert against the even share (settings.yaml `overload`: routed experts only)
--   mask                   id       the switch set (switch_sets); -1 for full recompute
--   switch_set             text     the switch set's name: none, all, switches joined by commas, or full
--   activation_bytes       bytes    kept for backward by the whole layer stack, per rank
--   budget_bytes           bytes    the budget: budget_gib GiB
--   fits                   flag     activation_bytes <= budget_bytes
--   headroom_bytes         bytes    budget_bytes - activation_bytes (negative: over budget)
--   recompute_flops        flops    forward FLOPs the set re-runs in the whole model
--   overhead_pct           percent  recompute_flops over the layers' forward + backward FLOPs, in per cent
CREATE OR REPLACE VIEW repo_fits AS
SELECT p.repo_id, p.downloads, p.config_hash, p.setting_id, p.stack, p.seq_length, p.micro_batch, p.tp, p.cp,
       p.in_flight, p.dropless_tok_factor, coalesce(p.mask, -1) AS mask, p.switch_set, p.total AS activation_bytes,
       coalesce(getvariable('budget_gib'), 80) * 2 ** 30 AS budget_bytes,
       p.total <= coalesce(getvariable('budget_gib'), 80) * 2 ** 30 AS fits,
       coalesce(getvariable('budget_gib'), 80) * 2 ** 30 - p.total AS headroom_bytes,
       c.recompute_flops, 100 * c.recompute_flops / nullif(c.step_flops, 0) AS overhead_pct
FROM repo_prices AS p
JOIN latest_run AS v ON true
JOIN model_costs AS c ON c.config_hash = p.config_hash AND c.census_version = v.census_version AND c.transformers_version = v.transformers_version AND c.torch_version = v.torch_version
                     AND c.records_version = v.records_version AND c.setting_id = p.setting_id
                     AND c.mask = coalesce(p.mask, -1);
