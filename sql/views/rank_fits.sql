-- View rank_fits: whole-rank memory for every model at once, at one parallel layout: per repo,
-- setting and switch set (full recompute included), what the fullest pipeline stage's rank
-- holds, against a budget. The layout is set by variables, each with its default: dp [1],
-- pp [1], ep [1], zero [0] (the ZeRO stage), vpp [1] (virtual stages per rank), etp [the
-- setting's tp], recipe [states.yaml's default], budget_gib [80] and accelerator [the
-- accelerators table's default] (SET VARIABLE pp = 4); tp, cp, the sequence length and the
-- micro-batch are the setting's.
-- A rank of stage i of pp holds its layers' activations and its ends' (the embedding on the
-- first stage, the final norm and the logits on the last), each for the micro-batches in
-- flight: pp - i in 1F1B, times 1 + (pp - 1)/(pp vpp) with vpp > 1 virtual stages; and its
-- weights, gradients and optimizer states (state_sharding: each parameter group divided among
-- the model-parallel ranks, a state the ZeRO stage partitions divided again over the data
-- group). Its layers are the stack in order, split as evenly as it goes (earlier stages one
-- more); the last stage of pp > 1 holds a copy of a tied word embedding. `speccat fit` ranks
-- the same totals for one repo over every layout (docs/planning.md); a test keeps the two equal.
-- The recompute a switch set costs is the first stage's (the pipeline's critical path), per
-- micro-batch: its layers' ops the set re-runs (switch_ops, op_costs), each estimated on the
-- accelerator as max(FLOPs / peak, bytes / bandwidth); per sequence it is that over dp · the
-- micro-batch, as the dp pipelines run side by side. ORDER BY recompute_s_per_seq, total_bytes,
-- mask = -1, mask ranks the sets that fit as `speccat fit` does (which lists, of sets equal in
-- both, the lowest mask only: here they all have rows).
-- Layouts with pp beyond the layers, or ep not dividing both the routed experts and dp·cp, have
-- no rows. For one repo, SET VARIABLE repo_id: the view then reads that repo's rows only (about
-- 0.4 s at 1,000 configs, where WHERE repo_id = ... evaluates every repo first); across the
-- catalogue, filter on setting_id and mask with constants (about 1 s at one setting and mask).
-- Grain: one row per (repo_id, setting_id, switch set), at the latest night's versions.
-- Columns:
--   repo_id                id       the Hub repo
--   config_hash            id       the repo's config
--   setting_id             id       the setting
--   stack                  code     the training stack priced: transformers or megatron
--   seq_length_tokens      tokens   the setting's sequence length
--   micro_batch_count      count    sequences per micro-batch
--   tp_ranks               count    tensor-parallel ranks (the setting's)
--   cp_ranks               count    context-parallel ranks (the setting's)
--   dp_ranks               count    data-parallel ranks (variable dp)
--   pp_ranks               count    pipeline stages (variable pp)
--   ep_ranks               count    expert-parallel ranks (variable ep)
--   zero_stage             code     the ZeRO stage (variable zero)
--   vpp_count              count    virtual stages per rank (variable vpp)
--   recipe                 code     the training recipe's bytes per parameter (state_sharding)
--   gpus_count             count    dp · tp · pp · cp
--   mask                   id       the switch set (switch_sets); -1 for full recompute
--   switch_set             code     its name: none, all, switches joined by commas, or full
--   fullest_stage          id       the pipeline stage whose rank holds the most (0 first)
--   in_flight_count        count    micro-batches in flight on that stage
--   activation_bytes       bytes    that rank's layers' activations, all micro-batches in flight
--   ends_bytes             bytes    its ends' (embedding; final norm and logits), all micro-batches in flight
--   weight_bytes           bytes    its weights
--   grad_bytes             bytes    its gradients
--   optimizer_bytes        bytes    its optimizer states
--   total_bytes            bytes    the sum: what the rank must hold
--   budget_bytes           bytes    the budget: budget_gib GiB
--   fits                   flag     total_bytes <= budget_bytes
--   headroom_bytes         bytes    budget_bytes - total_bytes (negative: over budget)
--   accelerator            code     the accelerator the time is estimated on (variable accelerator)
--   recompute_flops        flops    forward FLOPs the set re-runs on the first stage, per micro-batch
--   recompute_bytes        bytes    bytes its element-wise ops read and write there
--   recompute_s            seconds  its estimated time on the accelerator, op by op the slower of compute and memory
--   overhead_pct           percent  recompute_s over the same layers' forward + backward time, in per cent
--   recompute_s_per_seq    seconds  recompute_s over the sequences the dp pipelines take per micro-batch (dp · micro-batch)
CREATE OR REPLACE VIEW rank_fits AS
WITH layout AS (
    SELECT coalesce(getvariable('dp'), 1) AS dp, coalesce(getvariable('pp'), 1) AS pp,
           coalesce(getvariable('ep'), 1) AS ep, coalesce(getvariable('zero'), 0) AS zero,
           coalesce(getvariable('vpp'), 1) AS vpp, getvariable('etp') AS etp,
           coalesce(getvariable('recipe'), (SELECT any_value(recipe) FROM state_sharding WHERE default_recipe)) AS recipe,
           coalesce(getvariable('budget_gib'), 80) * 2 ** 30 AS budget
),
accelerator AS (
    SELECT * FROM accelerators
    WHERE accelerator = coalesce(getvariable('accelerator'), (SELECT accelerator FROM accelerators WHERE default_accelerator))
),
model AS (  -- the latest specs of the repos asked for, where the layout applies to them
    SELECT s.config_hash, s.census_version, s.transformers_version, s.torch_version, v.records_version, s.num_hidden_layers AS n_layers, s.spec,
           s.vocab_size, s.hidden_size, s.tie_word_embeddings
    FROM specs AS s JOIN latest_run AS v ON s.census_version = v.census_version AND s.transformers_version = v.transformers_version
                                      AND s.torch_version = v.torch_version, layout AS l
    WHERE l.pp <= s.num_hidden_layers
      AND coalesce(s.num_experts, 1) % l.ep = 0
      AND (getvariable('repo_id') IS NULL
           OR s.config_hash IN (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')))
),
runs AS (  -- each run of the stack: its kind and the layers [first, stop) it covers
    SELECT t.config_hash, t.kind, sum(t.count) OVER w - t.count AS first, sum(t.count) OVER w AS stop
    FROM stack AS t JOIN model AS m USING (config_hash, census_version, transformers_version, torch_version)
    WINDOW w AS (PARTITION BY t.config_hash ORDER BY t.position)
),
stages AS (  -- each stage's layers [lo, hi) and the micro-batches in flight on it
    SELECT m.config_hash, i.stage,
           i.stage * (m.n_layers // l.pp) + least(i.stage, m.n_layers % l.pp) AS lo,
           (i.stage + 1) * (m.n_layers // l.pp) + least(i.stage + 1, m.n_layers % l.pp) AS hi,
           (l.pp - i.stage) * CASE WHEN l.vpp > 1 THEN 1 + (l.pp - 1) / (l.pp * l.vpp) ELSE 1 END AS flight
    FROM model AS m, layout AS l, (SELECT unnest(range((SELECT pp FROM layout))) AS stage) AS i
),
stage_kinds AS (
    SELECT s.config_hash, s.stage, r.kind, sum(greatest(0, least(s.hi, r.stop) - greatest(s.lo, r.first))) AS layers
    FROM stages AS s JOIN runs AS r USING (config_hash)
    GROUP BY ALL HAVING sum(greatest(0, least(s.hi, r.stop) - greatest(s.lo, r.first))) > 0
),
kind_params AS (
    SELECT config_hash, census_version, transformers_version, torch_version, kind, replace(column_name, 'params_', '') AS "group", params
    FROM (UNPIVOT kinds ON params_attention, params_ffn_routed, params_ffn_shared, params_ffn_router,
                            params_ffn_dense, params_norm, params_other INTO NAME column_name VALUE params)
),
stage_params AS (  -- parameters per group on each stage, before model-parallel sharding
    SELECT k.config_hash, k.stage, p."group", sum(k.layers * p.params) AS params
    FROM stage_kinds AS k JOIN model AS m USING (config_hash)
    JOIN kind_params AS p ON p.config_hash = k.config_hash AND p.census_version = m.census_version AND p.transformers_version = m.transformers_version AND p.torch_version = m.torch_version AND p.kind = k.kind
    GROUP BY ALL
    UNION ALL
    SELECT m.config_hash, 0, 'embedding', (m.spec -> 'params' ->> 'embedding')::DOUBLE FROM model AS m
    UNION ALL
    SELECT m.config_hash, l.pp - 1, 'final_norm', (m.spec -> 'params' ->> 'final_norm')::DOUBLE FROM model AS m, layout AS l
    UNION ALL
    SELECT m.config_hash, l.pp - 1, 'output',
           CASE WHEN l.pp > 1 AND coalesce((m.spec -> 'params' ->> 'output')::DOUBLE, 0) = 0 AND m.tie_word_embeddings
                THEN m.vocab_size::DOUBLE * m.hidden_size  -- the last stage's copy of the tied word embedding
                ELSE (m.spec -> 'params' ->> 'output')::DOUBLE END
    FROM model AS m, layout AS l
),
priced AS (  -- the settings each spec is priced at (micro-batches in flight: the stages')
    SELECT DISTINCT f.config_hash, f.setting_id, g.tp, g.cp
    FROM full_prices AS f JOIN model AS m USING (config_hash, census_version, transformers_version, torch_version, records_version)
    JOIN settings AS g ON g.setting_id = f.setting_id, layout AS l
    WHERE g.in_flight = 1 AND (l.dp * g.cp) % l.ep = 0
),
stage_states AS (  -- each stage's weights, gradients and optimizer states at each setting
    SELECT p.config_hash, p.setting_id, s.stage,
           sum(p2.params * r.held) FILTER (WHERE r.state = 'weight') AS weight,
           sum(p2.params * r.held) FILTER (WHERE r.state = 'grad') AS grad,
           sum(p2.params * r.held) FILTER (WHERE r.state = 'optimizer') AS optimizer
    FROM priced AS p
    JOIN stages AS s USING (config_hash)
    JOIN stage_params AS p2 ON p2.config_hash = p.config_hash AND p2.stage = s.stage
    JOIN (  -- bytes one rank holds per parameter of a group, per state, at each (tp, cp)
          SELECT x."group", x.state, g.tp, g.cp,
                 x.bytes_per_param
                 / (pow(g.tp, x.model_t) * pow(g.cp, x.model_cp) * pow(l.dp, x.model_dp) * pow(l.ep, x.model_ep)
                    * pow(coalesce(l.etp, g.tp), x.model_etp))
                 / CASE WHEN l.zero >= x.sharded_from  -- a state the ZeRO stage partitions over the data group
                        THEN pow(g.tp, x.data_t) * pow(g.cp, x.data_cp) * pow(l.dp, x.data_dp) * pow(l.ep, x.data_ep)
                             * pow(coalesce(l.etp, g.tp), x.data_etp)
                        ELSE 1 END AS held
          FROM state_sharding AS x, layout AS l, (SELECT DISTINCT tp, cp FROM settings) AS g
          WHERE x.recipe = l.recipe) AS r
      ON r."group" = p2."group" AND r.tp = p.tp AND r.cp = p.cp
    GROUP BY ALL
),
points AS (  -- one layer of each kind at each setting and point: the masks, then full recompute (-1)
    SELECT config_hash, kind, setting_id, mask, total AS kept
    FROM layer_prices JOIN model USING (config_hash, census_version, transformers_version, torch_version, records_version)
    UNION ALL
    SELECT config_hash, kind, setting_id, -1, kept
    FROM full_prices JOIN model USING (config_hash, census_version, transformers_version, torch_version, records_version)
),
stage_totals AS (
    SELECT a.config_hash, a.setting_id, a.mask, a.stage, s.flight, a.activations * s.flight AS activations,
           (CASE WHEN a.stage = 0 THEN e.embedding ELSE 0 END
            + CASE WHEN a.stage = l.pp - 1 THEN e.final_norm + e.logits ELSE 0 END) * s.flight AS ends,
           t.weight, t.grad, t.optimizer
    FROM (SELECT k.config_hash, p.setting_id, p.mask, k.stage, sum(k.layers * p.kept) AS activations
          FROM stage_kinds AS k JOIN points AS p USING (config_hash, kind)
          SEMI JOIN priced AS q ON q.config_hash = p.config_hash AND q.setting_id = p.setting_id
          GROUP BY ALL) AS a
    JOIN stages AS s USING (config_hash, stage)
    JOIN stage_states AS t USING (config_hash, setting_id, stage)
    JOIN model AS m USING (config_hash)
    JOIN end_prices AS e ON e.config_hash = a.config_hash AND e.census_version = m.census_version AND e.transformers_version = m.transformers_version AND e.torch_version = m.torch_version
                        AND e.records_version = m.records_version AND e.setting_id = a.setting_id
    CROSS JOIN layout AS l
),
point_costs AS (  -- one layer of each kind at each setting: what each point re-runs, and its time
    SELECT o.config_hash, o.kind, o.setting_id, w.mask, sum(o.recompute_flops) AS flops, sum(o.recompute_bytes) AS moved,
           sum(greatest(o.recompute_flops / a.peak_flops_per_s, o.recompute_bytes / a.bandwidth_bytes_per_s)) AS seconds
    FROM op_costs AS o JOIN model USING (config_hash, census_version, transformers_version, torch_version, records_version)
    JOIN switch_ops AS w USING (op), accelerator AS a
    GROUP BY ALL
),
step_forwards AS (  -- the layer's step in forwards (costs.yaml step_factor): switch_costs' ratio at full recompute
    SELECT c.config_hash, c.kind, c.setting_id, c.step_flops / nullif(c.recompute_flops, 0) AS forwards
    FROM switch_costs AS c JOIN model USING (config_hash, census_version, transformers_version, torch_version, records_version)
    WHERE c.mask = -1
),
first_costs AS (  -- the first stage's layers, per micro-batch: each point's recompute and the step's time
    SELECT k.config_hash, p.setting_id, p.mask, sum(k.layers * coalesce(c.flops, 0)) AS flops,
           sum(k.layers * coalesce(c.moved, 0)) AS moved, sum(k.layers * coalesce(c.seconds, 0)) AS seconds,
           sum(k.layers * f.seconds * s.forwards) AS step_seconds
    FROM stage_kinds AS k JOIN points AS p USING (config_hash, kind)
    LEFT JOIN point_costs AS c ON c.config_hash = p.config_hash AND c.kind = p.kind AND c.setting_id = p.setting_id AND c.mask = p.mask
    JOIN point_costs AS f ON f.config_hash = p.config_hash AND f.kind = p.kind AND f.setting_id = p.setting_id AND f.mask = -1
    JOIN step_forwards AS s ON s.config_hash = p.config_hash AND s.kind = p.kind AND s.setting_id = p.setting_id
    WHERE k.stage = 0
    GROUP BY ALL
),
fullest AS (
    SELECT config_hash, setting_id, mask,
           arg_max(stage_totals, activations + ends + weight + grad + optimizer) AS f
    FROM stage_totals GROUP BY ALL
)
SELECT r.repo_id, x.config_hash, x.setting_id, g.stack, g.seq_length AS seq_length_tokens,
       g.micro_batch AS micro_batch_count, g.tp AS tp_ranks, g.cp AS cp_ranks, l.dp AS dp_ranks, l.pp AS pp_ranks,
       l.ep AS ep_ranks, l.zero AS zero_stage, l.vpp AS vpp_count, l.recipe, l.dp * g.tp * l.pp * g.cp AS gpus_count,
       x.mask, coalesce(w.name, 'full') AS switch_set, x.f.stage AS fullest_stage, x.f.flight AS in_flight_count,
       x.f.activations AS activation_bytes, x.f.ends AS ends_bytes, x.f.weight AS weight_bytes,
       x.f.grad AS grad_bytes, x.f.optimizer AS optimizer_bytes,
       x.f.activations + x.f.ends + x.f.weight + x.f.grad + x.f.optimizer AS total_bytes,
       l.budget AS budget_bytes,
       x.f.activations + x.f.ends + x.f.weight + x.f.grad + x.f.optimizer <= l.budget AS fits,
       l.budget - (x.f.activations + x.f.ends + x.f.weight + x.f.grad + x.f.optimizer) AS headroom_bytes,
       a.accelerator, c.flops AS recompute_flops, c.moved AS recompute_bytes, c.seconds AS recompute_s,
       100 * c.seconds / nullif(c.step_seconds, 0) AS overhead_pct,
       c.seconds / (l.dp * g.micro_batch) AS recompute_s_per_seq
FROM fullest AS x
JOIN repos AS r ON r.config_hash = x.config_hash
JOIN settings AS g ON g.setting_id = x.setting_id
LEFT JOIN switch_sets AS w ON w.mask = x.mask
LEFT JOIN first_costs AS c ON c.config_hash = x.config_hash AND c.setting_id = x.setting_id AND c.mask = x.mask
CROSS JOIN layout AS l
CROSS JOIN accelerator AS a;
