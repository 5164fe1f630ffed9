-- One repo's switch sets ranked by the whole-model bytes they keep at one setting, least
-- first, with what each saves against no recompute.
-- Parameters: repo_id (required); seq_length [4096], micro_batch [1], tp [1], cp [1].
SET VARIABLE _config_hash = coalesce(
    (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')),
    error('repo_id ' || coalesce(getvariable('repo_id'), '(not set)') || ' has no config in the catalogue'));

WITH priced AS (
    SELECT mask, switch_set, n_recomputed, total
    FROM repo_prices
    WHERE config_hash = getvariable('_config_hash') AND repo_id = getvariable('repo_id')
      AND mask IS NOT NULL
      AND seq_length = coalesce(getvariable('seq_length'), 4096)
      AND micro_batch = coalesce(getvariable('micro_batch'), 1)
      AND tp = coalesce(getvariable('tp'), 1)
      AND cp = coalesce(getvariable('cp'), 1)
)
SELECT rank() OVER (ORDER BY total, n_recomputed) AS rank,
       mask, switch_set, n_recomputed, total, round(total / 2 ** 30, 3) AS total_gib,
       (SELECT total FROM priced WHERE mask = 0) - total AS saved
FROM priced
ORDER BY rank, mask;
