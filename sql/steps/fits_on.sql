-- The table fits_on's rows for the specs of the variable config_hashes, a batch of those
-- sql/steps/fits_on_pending.sql lists (specs with prices and without rows at the current
-- plan_version; sql/steps/fits_on_batch.sql sets it): run after the merge, on the stored
-- prices, with the planner's own macros, so that the table answers as `speccat fit` does.
-- For each spec, stack, sequence length, GPU count and memory size: the (layout, switch set) of
-- fits_on_layouts' layouts that rank_layouts finds fitting, first in fitting_sets' order (fewest
-- estimated recompute seconds per sequence, then fewest bytes, full recompute after every set,
-- then the lower mask, then the layout's place among the GPU count's); none where nothing fits.
CREATE OR REPLACE TEMP TABLE fits_on_tried AS  -- fits_on_layouts as the planner's macros read a layouts table
SELECT row_number() OVER (ORDER BY l.gpus, l.position, l.setting_id)::INTEGER AS layout, l.gpus, l.position, l.dp, l.pp, l.ep,
       l.zero, 1 AS vpp, NULL::INTEGER AS etp, l.setting_id, z.recipe, z.budget_bytes, z.accelerator, true AS only_fitting
FROM fits_on_layouts AS l,
     (SELECT any_value(recipe) AS recipe, any_value(accelerator) AS accelerator, max(gpu_mem_gib) * 2 ** 30 AS budget_bytes
      FROM fits_on_sizes) AS z
WHERE len(getvariable('config_hashes')) > 0;

INSERT INTO fits_on BY NAME
WITH fitting AS (  -- every (layout, spec, setting, set) whose fullest rank fits the largest size (a row per repo of the spec)
    SELECT r.config_hash, t.gpus, t.position, r.stack, r.seq_length_tokens AS seq_length, r.dp_ranks AS dp, r.tp_ranks AS tp,
           r.pp_ranks AS pp, r.cp_ranks AS cp, r.ep_ranks AS ep, r.zero_stage AS zero, r.mask, r.switch_set, r.fullest_stage,
           r.activation_bytes, r.ends_bytes, r.loss_working_bytes, r.remade_bytes, r.backward_bytes, r.weight_bytes, r.grad_bytes, r.optimizer_bytes, r.total_bytes, r.recompute_s_per_seq,
           r.overhead_pct, CASE WHEN r.mask = -1 THEN 1 ELSE 0 END AS full_last
    FROM rank_layouts('fits_on_tried') AS r JOIN fits_on_tried AS t USING (layout)
    WHERE r.fits
),
stairs AS (  -- per question but the size, in fitting_sets' order, the rows holding fewer bytes than every row before them:
             -- the first row within a size is one of these
    SELECT * FROM (
        SELECT *, min(total_bytes) OVER (PARTITION BY config_hash, stack, seq_length, gpus
                                         ORDER BY recompute_s_per_seq, total_bytes, full_last, mask, position
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS fewest_before
        FROM fitting)
    WHERE fewest_before IS NULL OR total_bytes < fewest_before
),
best AS (  -- per question, the first row within the size
    SELECT z.gpu_mem_gib, s.* EXCLUDE (fewest_before)
    FROM stairs AS s JOIN fits_on_sizes AS z ON s.total_bytes <= z.gpu_mem_gib * 2 ** 30
    QUALIFY row_number() OVER (PARTITION BY s.config_hash, s.stack, s.seq_length, s.gpus, z.gpu_mem_gib
                               ORDER BY s.recompute_s_per_seq, s.total_bytes, s.full_last, s.mask, s.position) = 1
),
asked AS (  -- every question about the specs built tonight
    SELECT m.config_hash, m.census_version, m.transformers_version, m.torch_version, v.records_version, z.plan_version,
           q.stack, q.seq_length, q.gpus, z.gpu_mem_gib
    FROM specs AS m JOIN latest_run AS v USING (census_version, transformers_version, torch_version)
    CROSS JOIN (SELECT DISTINCT t.gpus, g.stack, g.seq_length FROM fits_on_tried AS t JOIN settings AS g USING (setting_id)) AS q
    CROSS JOIN fits_on_sizes AS z
    WHERE list_contains(getvariable('config_hashes'), m.config_hash)
)
SELECT a.*, b.config_hash IS NOT NULL AS fits, b.dp, b.tp, b.pp, b.cp, b.ep, b.zero, b.mask, b.switch_set, b.fullest_stage,
       b.activation_bytes, b.ends_bytes, b.loss_working_bytes, b.remade_bytes, b.backward_bytes, b.weight_bytes, b.grad_bytes, b.optimizer_bytes, b.total_bytes, b.recompute_s_per_seq,
       b.overhead_pct
FROM asked AS a
LEFT JOIN best AS b USING (config_hash, stack, seq_length, gpus, gpu_mem_gib)
ORDER BY a.config_hash, a.stack, a.seq_length, a.gpus, a.gpu_mem_gib;

DROP TABLE fits_on_tried;
RESET VARIABLE config_hashes;
