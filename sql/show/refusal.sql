-- `speccat fit`: the latest night's refusal of one repo (one row, or none): the stage, the
-- reason and the message the night stored. A repo the night refused to price keeps its spec
-- (the census ran) but has no prices to trust; `fit` refuses it with this reason.
-- Parameter: repo_id.
SELECT f.stage, f.reason, f.message
FROM failures AS f
WHERE f.repo_id = getvariable('repo_id')
  AND f.run_id = (SELECT run_id FROM latest_run);
