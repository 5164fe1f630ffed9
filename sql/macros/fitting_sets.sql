-- Macro fitting_sets(layouts): of rank_layouts(layouts), the switch sets that fit, and of those
-- only the ones no other set of the same layout, repo and setting beats on both the bytes the
-- rank holds and the recompute time (of sets equal in both, the lowest mask, full recompute
-- last), ranked as `speccat fit` lists them: by recompute seconds per sequence, then total
-- bytes, then mask (full recompute after every mask). With the variable offload_search true
-- (rank_stages' rows at every offload count), offload is the third action: of the (set, count)
-- pairs that fit, those no other pair beats on the bytes, the recompute time and the time of
-- the copies to host memory and back (offload_s), of pairs equal in all three the fewest layers
-- offloaded, then the lowest mask; ranked by recompute seconds per sequence, then copy seconds,
-- then total bytes.
-- Grain: one row per (layout, repo_id, setting_id, switch set, offload count) that fits and is
-- on its frontier.
-- Columns: rank_layouts' (see the view rank_fits), after `layout`, the layout's number.
CREATE OR REPLACE MACRO fitting_sets(layouts) AS TABLE
WITH search AS (
    SELECT coalesce(getvariable('offload_search'), false) AS offload
),
fitting AS (
    SELECT *, CASE WHEN mask = -1 THEN 1 ELSE 0 END AS full_last,
           CASE WHEN (SELECT offload FROM search) THEN offload_s ELSE 0 END AS copy_s  -- a frontier dimension only when searched
    FROM rank_layouts(layouts)
    WHERE fits
),
fastest_before AS (  -- per set, the least recompute time of the sets holding fewer bytes (or as few, listed first)
    SELECT *, min(recompute_s) OVER (
               PARTITION BY layout, repo_id, setting_id ORDER BY total_bytes, recompute_s, full_last, mask
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS beaten_below
    FROM fitting WHERE NOT (SELECT offload FROM search)
),
frontier AS (
    SELECT * EXCLUDE (beaten_below) FROM fastest_before WHERE beaten_below IS NULL OR recompute_s < beaten_below
    UNION ALL
    SELECT * FROM fitting AS r
    WHERE (SELECT offload FROM search) AND NOT EXISTS (  -- no more bytes, recompute or copy time, and first in that order
        SELECT 1 FROM fitting AS o
        WHERE o.layout = r.layout AND o.repo_id = r.repo_id AND o.setting_id = r.setting_id
          AND o.total_bytes <= r.total_bytes AND o.recompute_s <= r.recompute_s AND o.copy_s <= r.copy_s
          AND (o.total_bytes, o.recompute_s, o.copy_s, o.offload_layers, o.full_last, o.mask)
              < (r.total_bytes, r.recompute_s, r.copy_s, r.offload_layers, r.full_last, r.mask))
)
SELECT * EXCLUDE (full_last, copy_s)
FROM frontier
ORDER BY recompute_s_per_seq, copy_s, total_bytes, offload_layers, full_last, mask, layout;
