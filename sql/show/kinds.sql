-- `speccat show`: the layer kinds of one repo's latest spec, in stack order. Parameter: repo_id.
SELECT k.* EXCLUDE (config_hash, census_version, transformers_version, torch_version)
FROM kinds AS k
JOIN repos AS r ON r.config_hash = k.config_hash
JOIN latest_run AS v ON v.census_version = k.census_version AND v.transformers_version = k.transformers_version AND v.torch_version = k.torch_version
LEFT JOIN (SELECT config_hash, census_version, transformers_version, torch_version, kind, min(position) AS first
           FROM stack GROUP BY ALL) AS s
       ON s.config_hash = k.config_hash AND s.census_version = k.census_version AND s.transformers_version = k.transformers_version AND s.torch_version = k.torch_version AND s.kind = k.kind
WHERE r.repo_id = getvariable('repo_id')
ORDER BY s.first, k.kind;
