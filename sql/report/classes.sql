-- Report query classes: every class of equivalent switch sets of every repo the report draws (the relation
-- report_repos) at one setting, on
-- the frontier or not, full recompute included (the view switch_classes, filtered on the
-- variable setting_id so the scans of the costs and prices read that setting only): the points
-- of the frontier plot, each marked with whether it is on the frontier.
-- Grain: one row per (repo_id, kind, class of equivalent switch sets) at the setting.
-- Columns: repo_id, kind, layers_count, mask, switch_set, n_equivalent_count, equivalents,
-- kept_bytes, saved_bytes, saved_pct, overhead_pct, on_frontier: as the view states them.
SELECT repo_id, kind, layers_count, mask, switch_set, n_equivalent_count, equivalents,
       kept_bytes, saved_bytes, saved_pct, overhead_pct, on_frontier
FROM switch_classes
SEMI JOIN report_repos USING (repo_id)
WHERE setting_id = getvariable('setting_id')
ORDER BY repo_id, kind, overhead_pct, kept_bytes DESC, mask;
