-- `speccat fit`: one repo's spec JSON at the latest night's census version and libraries (one row, or none).
-- Parameter: repo_id.
SELECT s.config_hash, s.spec
FROM repos AS r
JOIN specs AS s ON s.config_hash = r.config_hash
WHERE r.repo_id = getvariable('repo_id')
  AND (s.census_version, s.transformers_version, s.torch_version)
      = (SELECT (census_version, transformers_version, torch_version) FROM latest_run);
