-- The most downloaded models whose whole-model activations, at one setting and one switch
-- set, fit under a budget (per rank, one micro-batch in flight).
-- Parameters (defaults in brackets): budget_gib [80], seq_length [4096], micro_batch [1],
--   tp [1], cp [1], switches [none]: 'none', 'all', 'full', or switch names joined by commas
--   in any order (attBMM,softmax).
WITH wanted AS (
    SELECT coalesce(getvariable('switches'), 'none') AS switches
),
switch_set AS (
    SELECT w.name FROM switch_sets AS w, wanted
    WHERE w.name = wanted.switches
       OR list_sort(w.switches) = list_sort(string_split(replace(wanted.switches, ' ', ''), ','))
    UNION SELECT 'full' FROM wanted WHERE switches = 'full'
)
SELECT repo_id, downloads, likes, switch_set, seq_length, micro_batch, tp, cp,
       total, round(total / 2 ** 30, 3) AS total_gib
FROM repo_prices
WHERE switch_set IN (SELECT name FROM switch_set)
  AND seq_length = coalesce(getvariable('seq_length'), 4096)
  AND micro_batch = coalesce(getvariable('micro_batch'), 1)
  AND tp = coalesce(getvariable('tp'), 1)
  AND cp = coalesce(getvariable('cp'), 1)
  AND total <= coalesce(getvariable('budget_gib'), 80) * 2 ** 30
ORDER BY downloads DESC NULLS LAST, repo_id;
