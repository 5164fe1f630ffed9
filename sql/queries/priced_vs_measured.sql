-- The records' price of one layer with no recompute next to the bytes autograd saved in the
-- census, per token, for every kind of every repo's latest spec.
-- Parameters: repo_id (optional).
SELECT r.repo_id, p.kind, p.seq_length, p.attention_impl, p.experts_impl,
       p.priced_per_token, p.measured_per_token, p.unattributed_per_token, round(p.ratio, 3) AS ratio, p.cause
FROM repos AS r
JOIN priced_vs_measured AS p ON p.config_hash = r.config_hash
JOIN latest_run AS v ON v.census_version = p.census_version AND v.records_version = p.records_version
WHERE getvariable('repo_id') IS NULL OR r.repo_id = getvariable('repo_id')
ORDER BY r.repo_id, p.kind;
