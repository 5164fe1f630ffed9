-- Macro fitting_sets(layouts): of rank_layouts(layouts), the switch sets that fit, and of those
-- only the ones no other set of the same layout, repo and setting beats on both the bytes the
-- rank holds and the recompute time (of sets equal in both, the lowest mask, full recompute
-- last), ranked as `speccat fit` lists them: by recompute seconds per sequence, then total
-- bytes, then mask (full recompute after every mask).
-- Grain: one row per (layout, repo_id, setting_id, switch set) that fits and is on its frontier.
-- Columns: rank_layouts' (see the view rank_fits), after `layout`, the layout's number.
CREATE OR REPLACE MACRO fitting_sets(layouts) AS TABLE
WITH fitting AS (
    SELECT *, CASE WHEN mask = -1 THEN 1 ELSE 0 END AS full_last
    FROM rank_layouts(layouts)
    WHERE fits
),
fastest_before AS (  -- per set, the least recompute time of the sets holding fewer bytes (or as few, listed first)
    SELECT *, min(recompute_s) OVER (
               PARTITION BY layout, repo_id, setting_id ORDER BY total_bytes, recompute_s, full_last, mask
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS beaten_below
    FROM fitting
)
SELECT * EXCLUDE (full_last, beaten_below)
FROM fastest_before
WHERE beaten_below IS NULL OR recompute_s < beaten_below
ORDER BY recompute_s_per_seq, total_bytes, full_last, mask, layout;
