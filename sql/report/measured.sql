-- Report query measured: priced against measured at the latest versions, for every repo the report
-- draws (the relation report_repos; the views priced_vs_measured, latest_run and latest_specs).
-- Grain: one row per (repo_id, kind, point).
-- Columns:
--   repo_id             id           the Hub repo
--   kind                text         the layer kind
--   point               text         the measurement point
--   seq_length          tokens       the point's sequence length
--   tp                  count        its tensor-parallel ranks
--   cp                  count        its context-parallel ranks
--   priced_per_token    bytes/token  the records' price of one layer at the point
--   measured_per_token  bytes/token  what the census measured there
--   ratio               ratio        priced / measured
--   cause               text         why the ratio is more than 0.5% from 1
SELECT s.repo_id, p.kind, p.point, p.seq_length, p.tp, p.cp, p.priced_per_token, p.measured_per_token, p.ratio, p.cause
FROM priced_vs_measured AS p
JOIN latest_run AS v ON v.census_version = p.census_version AND v.transformers_version = p.transformers_version
                    AND v.torch_version = p.torch_version AND v.records_version = p.records_version
JOIN latest_specs AS s ON s.config_hash = p.config_hash
SEMI JOIN report_repos AS d ON d.repo_id = s.repo_id
WHERE p.priced_per_token IS NOT NULL AND p.measured_per_token IS NOT NULL
ORDER BY s.repo_id, p.kind, p.point;
