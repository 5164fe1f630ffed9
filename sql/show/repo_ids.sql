-- `speccat show` and the per-repo queries: every stored repo id, to match a typed id against.
SELECT repo_id FROM repos ORDER BY repo_id;
