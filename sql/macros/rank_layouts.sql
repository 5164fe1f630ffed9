-- Macro rank_layouts(layouts): of rank_stages(layouts), each layout's fullest stage: per
-- layout, repo, setting and switch set, the stage whose rank holds the most (of stages holding
-- as much, the first), which is the rank that must fit.
-- Grain: one row per (layout, repo_id, setting_id, switch set), at the latest night's versions.
-- Columns: rank_fits' (see its view), after `layout`, the layout's number.
CREATE OR REPLACE MACRO rank_layouts(layouts) AS TABLE
SELECT * EXCLUDE (fullest) RENAME (stage AS fullest_stage)
FROM rank_stages(layouts)
WHERE fullest;
