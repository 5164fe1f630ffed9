-- The most downloaded models whose whole-model activations, at one setting and one switch
-- set, fit under a budget (per rank, one micro-batch in flight).
-- Parameters (defaults in brackets): budget_gib [80], switches [none]: 'none', 'all', 'full',
--   or switch names joined by commas in any order (attBMM,softmax); stack, seq_length, micro_batch,
--   tp, cp, dropless_tok_factor [the grid's defaults: the table setting_defaults, through the view
--   chosen_settings; at a dropless_tok_factor of settings.yaml's `overload` only the models with
--   routed experts have prices].
-- The settings and the switch set are looked up first, so the scan of the prices filters on them.
SET VARIABLE _setting_ids = coalesce(
    (SELECT list(setting_id) FROM chosen_settings),
    error('no setting of the grid has that seq_length, micro_batch, tp, cp and dropless_tok_factor'));

SET VARIABLE _switch_set = coalesce(
    (SELECT any_value(name) FROM switch_sets
     WHERE name = coalesce(getvariable('switches'), 'none')
        OR list_sort(switches) = list_sort(string_split(replace(coalesce(getvariable('switches'), ''), ' ', ''), ','))),
    CASE WHEN getvariable('switches') = 'full' THEN 'full' END,
    error('switches ' || getvariable('switches') || ' names no switch set: use none, all, full or switch names joined by commas'));
SET VARIABLE _mask = (SELECT mask FROM switch_sets WHERE name = getvariable('_switch_set'));

SELECT repo_id, downloads, likes, switch_set, seq_length, micro_batch, tp, cp,
       total, round(total / 2 ** 30, 3) AS total_gib
FROM repo_prices
WHERE list_contains(getvariable('_setting_ids'), setting_id)
  AND (mask = getvariable('_mask') OR (getvariable('_mask') IS NULL AND switch_set = 'full'))
  AND total <= coalesce(getvariable('budget_gib'), 80) * 2 ** 30
ORDER BY downloads DESC NULLS LAST, repo_id;
