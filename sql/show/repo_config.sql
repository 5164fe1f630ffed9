-- `speccat census` and `speccat price` given a repo id: the config the catalogue stored for the
-- repo's config_hash (one row, or none when the repo has no config). Parameter: repo_id.
SELECT c.config FROM repos AS r JOIN configs AS c USING (config_hash)
WHERE r.repo_id = getvariable('repo_id');
