-- The records' price of one layer next to the bytes the census measured, per token, at each
-- point it measured (its own setting, a second sequence length, cp and tp ranks, switch sets
-- recomputed), for every kind of every repo's latest spec; and costs.yaml's FLOPs of the layer's
-- forward next to those the census counted (at the point `census`).
-- Parameters: repo_id (optional).
SELECT r.repo_id, p.kind, p.point, p.seq_length, p.tp, p.cp, p.attention_impl, p.experts_impl,
       p.priced_per_token, p.measured_per_token, p.unattributed_per_token,
       p.cached_per_token, round(p.ratio, 3) AS ratio, p.cause,
       p.priced_forward_flops, p.measured_forward_flops, round(p.forward_flops_ratio, 3) AS forward_flops_ratio,
       p.forward_flops_cause
FROM repos AS r
JOIN priced_vs_measured AS p ON p.config_hash = r.config_hash
JOIN latest_run AS v ON v.census_version = p.census_version AND v.transformers_version = p.transformers_version AND v.torch_version = p.torch_version AND v.records_version = p.records_version
WHERE getvariable('repo_id') IS NULL OR r.repo_id = getvariable('repo_id')
ORDER BY r.repo_id, p.kind, p.point = 'census' DESC, p.point;
