-- The specs sql/steps/fits_on.sql answers next: every spec at the latest night's versions that has
-- prices and lacks fits_on rows at the plan_version of fits_on_sizes (a new spec, or every spec
-- when the questions, the grid, the recipes or the accelerators changed), in config_hash order.
-- The store answers them a batch at a time (catalogue/store/limits.yaml `fits_on_batch_specs`),
-- so that what a batch holds in memory does not grow with the night.
SELECT DISTINCT s.config_hash
FROM specs AS s JOIN latest_run AS v USING (census_version, transformers_version, torch_version)
WHERE EXISTS (SELECT 1 FROM fits_on_sizes)
  AND EXISTS (SELECT 1 FROM full_prices AS f
              WHERE f.config_hash = s.config_hash AND f.census_version = s.census_version AND f.transformers_version = s.transformers_version
                AND f.torch_version = s.torch_version AND f.records_version = v.records_version)
  AND NOT EXISTS (SELECT 1 FROM fits_on AS o
                  WHERE o.config_hash = s.config_hash AND o.census_version = s.census_version AND o.transformers_version = s.transformers_version
                    AND o.torch_version = s.torch_version AND o.records_version = v.records_version
                    AND o.plan_version = (SELECT any_value(plan_version) FROM fits_on_sizes))
ORDER BY s.config_hash;
