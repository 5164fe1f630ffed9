-- Merge the night's rows (catalog `incoming`, filled by the store from a NightData) into the
-- catalogue being built: a copy of the published file, or the DuckLake, made the default
-- catalog with USE. Every statement is a no-op when its rows are already there, so storing the
-- same run twice changes nothing.
--
-- Carried tables keep what is stored: a row whose key is already present is not inserted again
-- (sql/steps/conflicts.sql has refused the run first if tonight's row differs). Spec-derived tables
-- and prices are carried as whole groups: (config_hash, census_version) for a spec's tables,
-- (config_hash, census_version, records_version, setting_id) for its prices, so a spec priced
-- under an older grid gains the prices of a new grid's settings beside those it has. All of
-- tonight's prices share one census and one records version, so a price group is known by its
-- config_hash and setting_id.

INSERT INTO configs BY NAME
SELECT * FROM incoming.configs AS n
WHERE NOT EXISTS (SELECT 1 FROM configs AS o WHERE o.config_hash = n.config_hash)
ORDER BY config_hash;

INSERT INTO specs BY NAME
SELECT * FROM incoming.specs AS n
WHERE NOT EXISTS (SELECT 1 FROM specs AS o
                  WHERE o.config_hash = n.config_hash AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version)
ORDER BY config_hash, census_version, transformers_version, torch_version;

INSERT INTO kinds BY NAME
SELECT * FROM incoming.kinds AS n
WHERE NOT EXISTS (SELECT 1 FROM kinds AS o
                  WHERE o.config_hash = n.config_hash AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version)
ORDER BY config_hash, census_version, transformers_version, torch_version, kind;

INSERT INTO stack BY NAME
SELECT * FROM incoming.stack AS n
WHERE NOT EXISTS (SELECT 1 FROM stack AS o
                  WHERE o.config_hash = n.config_hash AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version)
ORDER BY config_hash, census_version, transformers_version, torch_version, position;

INSERT INTO measured BY NAME
SELECT * FROM incoming.measured AS n
WHERE NOT EXISTS (SELECT 1 FROM measured AS o
                  WHERE o.config_hash = n.config_hash AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version)
ORDER BY config_hash, census_version, transformers_version, torch_version, kind, point, op;

INSERT INTO settings BY NAME
SELECT * FROM incoming.settings AS n
WHERE NOT EXISTS (SELECT 1 FROM settings AS o WHERE o.setting_id = n.setting_id)
ORDER BY setting_id;

INSERT INTO switch_sets BY NAME
SELECT * FROM incoming.switch_sets AS n
WHERE NOT EXISTS (SELECT 1 FROM switch_sets AS o WHERE o.mask = n.mask)
ORDER BY mask;

-- Prices come straight from the staged Arrow tables, whole groups at a time, in the order the
-- store staged them (by config_hash, which keeps each config's rows together for the zone maps
-- that make per-model queries fast). A group is stored when its full_prices rows are, so the
-- (small) full_prices table answers which groups are new. The usual night has only new groups:
-- then the rows are appended by a plain scan, which keeps their order; when some are already
-- stored (a run stored again, or a stored spec priced at a new grid), the new ones are picked
-- by a join and sorted back.
CREATE OR REPLACE TEMP TABLE new_price_groups AS
SELECT DISTINCT config_hash, census_version, transformers_version, torch_version, records_version, setting_id FROM staged_full_prices AS n
WHERE NOT EXISTS (SELECT 1 FROM full_prices AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id);
SET VARIABLE _all_prices_new = (SELECT count(*) FROM temp.new_price_groups)
                             = (SELECT count(*) FROM (SELECT DISTINCT config_hash, setting_id FROM staged_full_prices));

INSERT INTO layer_prices BY NAME
SELECT * FROM staged_layer_prices WHERE getvariable('_all_prices_new');
INSERT INTO layer_prices BY NAME
SELECT * FROM staged_layer_prices AS n
WHERE NOT getvariable('_all_prices_new')
  AND config_hash IN (SELECT config_hash FROM temp.new_price_groups)
  AND EXISTS (SELECT 1 FROM temp.new_price_groups AS g
              WHERE g.config_hash = n.config_hash AND g.setting_id = n.setting_id)
ORDER BY config_hash, kind, setting_id, mask;

INSERT INTO full_prices BY NAME
SELECT * FROM staged_full_prices AS n
WHERE EXISTS (SELECT 1 FROM temp.new_price_groups AS g
              WHERE g.config_hash = n.config_hash AND g.setting_id = n.setting_id)
ORDER BY config_hash, kind, setting_id;

DROP TABLE temp.new_price_groups;
RESET VARIABLE _all_prices_new;

-- The recompute costs and the frontier (switch_costs) go in the same whole groups, a group
-- being new when switch_costs lacks its full recompute rows: so prices stored before the
-- catalogue had costs (the flow prices such a config again, sql/steps/stored.sql) gain theirs.
CREATE OR REPLACE TEMP TABLE new_cost_groups AS
SELECT DISTINCT config_hash, census_version, transformers_version, torch_version, records_version, setting_id FROM staged_switch_costs AS n
WHERE n.mask = -1
  AND NOT EXISTS (SELECT 1 FROM switch_costs AS o WHERE o.mask = -1 AND o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id);
SET VARIABLE _all_costs_new = (SELECT count(*) FROM temp.new_cost_groups)
                            = (SELECT count(*) FROM (SELECT DISTINCT config_hash, setting_id FROM staged_switch_costs));
INSERT INTO switch_costs BY NAME
SELECT * FROM staged_switch_costs WHERE getvariable('_all_costs_new');
INSERT INTO switch_costs BY NAME
SELECT * FROM staged_switch_costs AS n
WHERE NOT getvariable('_all_costs_new')
  AND config_hash IN (SELECT config_hash FROM temp.new_cost_groups)
  AND EXISTS (SELECT 1 FROM temp.new_cost_groups AS g
              WHERE g.config_hash = n.config_hash AND g.setting_id = n.setting_id)
ORDER BY config_hash, kind, setting_id, mask;
DROP TABLE temp.new_cost_groups;
RESET VARIABLE _all_costs_new;

-- Settings a config cannot be laid out at (no prices there): stored as whole groups too, a
-- group being a (config, census version, records version, setting) not stored yet.
INSERT INTO infeasible_settings BY NAME
SELECT * FROM incoming.infeasible_settings AS n
WHERE NOT EXISTS (SELECT 1 FROM infeasible_settings AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id)
ORDER BY config_hash, setting_id, kind;

-- The price at each setting a spec was measured at: a group is (config, census version,
-- records version).
INSERT INTO point_prices BY NAME
SELECT * FROM incoming.point_prices AS n
WHERE NOT EXISTS (SELECT 1 FROM point_prices AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version)
ORDER BY config_hash, kind, point;

-- The ends' prices at each setting priced, added as the prices are: a row is new when no row of
-- its (config, census version, records version, setting) is stored.
INSERT INTO end_prices BY NAME
SELECT * FROM incoming.end_prices AS n
WHERE NOT EXISTS (SELECT 1 FROM end_prices AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id)
ORDER BY config_hash, setting_id;

-- The logits end under each loss kernel, added as the ends' prices are.
INSERT INTO loss_prices BY NAME
SELECT * FROM incoming.loss_prices AS n
WHERE NOT EXISTS (SELECT 1 FROM loss_prices AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id)
ORDER BY config_hash, setting_id, loss;

-- Each op's recompute cost at each setting priced, added as the ends' prices are.
INSERT INTO op_costs BY NAME
SELECT * FROM incoming.op_costs AS n
WHERE NOT EXISTS (SELECT 1 FROM op_costs AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id)
ORDER BY config_hash, kind, setting_id, op;

-- Each op's share at each setting of the memory curve, added as the op costs are.
INSERT INTO op_prices BY NAME
SELECT * FROM incoming.op_prices AS n
WHERE NOT EXISTS (SELECT 1 FROM op_prices AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id)
ORDER BY config_hash, kind, setting_id, part, op;

-- Reference tables: the vocabulary and the grid's default setting are tonight's, whatever an
-- earlier night stored (a new description, a new default). Only rows that differ are touched.
-- The data files' tables with a primary key (the recipes' sharding, the switch sets' ops, the
-- accelerators, the schedules, the loss kernels, the frameworks' flags) are replaced the same
-- way, each by sql/steps/replace_reference.sql after this file (catalogue/store/file.py).

DELETE FROM vocabulary
WHERE (list, code) IN (SELECT (list, code) FROM (SELECT * FROM vocabulary EXCEPT SELECT * FROM incoming.vocabulary));
INSERT INTO vocabulary BY NAME
SELECT * FROM (SELECT * FROM incoming.vocabulary EXCEPT SELECT * FROM vocabulary)
ORDER BY list, position;

DELETE FROM setting_defaults
WHERE setting_id NOT IN (SELECT setting_id FROM incoming.setting_defaults);
INSERT INTO setting_defaults BY NAME
SELECT * FROM (SELECT * FROM incoming.setting_defaults EXCEPT SELECT * FROM setting_defaults);

-- The questions of the table fits_on: replaced whole when tonight's differ (another plan_version).
DELETE FROM fits_on_sizes
WHERE EXISTS (SELECT 1 FROM incoming.fits_on_sizes)
  AND plan_version NOT IN (SELECT plan_version FROM incoming.fits_on_sizes);
INSERT INTO fits_on_sizes BY NAME
SELECT * FROM incoming.fits_on_sizes
WHERE plan_version NOT IN (SELECT plan_version FROM fits_on_sizes)
ORDER BY gpu_mem_gib;

DELETE FROM fits_on_layouts
WHERE EXISTS (SELECT 1 FROM incoming.fits_on_layouts)
  AND plan_version NOT IN (SELECT plan_version FROM incoming.fits_on_layouts);
INSERT INTO fits_on_layouts BY NAME
SELECT * FROM incoming.fits_on_layouts
WHERE plan_version NOT IN (SELECT plan_version FROM fits_on_layouts)
ORDER BY gpus, position, setting_id;

-- Run-scoped tables: tonight's rows replace whatever an earlier store of the same run left.
-- Only rows that differ are deleted and inserted.

DELETE FROM runs
WHERE run_id IN (SELECT run_id FROM (SELECT * FROM runs WHERE run_id IN (SELECT run_id FROM incoming.runs)
                                     EXCEPT SELECT * FROM incoming.runs));
INSERT INTO runs BY NAME
SELECT * FROM (SELECT * FROM incoming.runs EXCEPT SELECT * FROM runs);

DELETE FROM crawls
WHERE run_id IN (SELECT run_id FROM (SELECT * FROM crawls WHERE run_id IN (SELECT run_id FROM incoming.runs)
                                     EXCEPT SELECT * FROM incoming.crawls));
INSERT INTO crawls BY NAME
SELECT * FROM (SELECT * FROM incoming.crawls EXCEPT SELECT * FROM crawls);

DELETE FROM repo_history
WHERE run_id IN (SELECT run_id FROM incoming.runs)
  AND repo_id IN (SELECT repo_id FROM (
        SELECT * FROM repo_history WHERE run_id IN (SELECT run_id FROM incoming.runs)
        EXCEPT SELECT * FROM incoming.repo_history));
INSERT INTO repo_history BY NAME
SELECT * FROM (SELECT * FROM incoming.repo_history EXCEPT SELECT * FROM repo_history)
ORDER BY repo_id, run_id;

DELETE FROM failures
WHERE run_id IN (SELECT run_id FROM incoming.runs)
  AND repo_id IN (SELECT repo_id FROM (
        SELECT * FROM failures WHERE run_id IN (SELECT run_id FROM incoming.runs)
        EXCEPT SELECT * FROM incoming.failures));
INSERT INTO failures BY NAME
SELECT * FROM (SELECT * FROM incoming.failures EXCEPT SELECT * FROM failures)
ORDER BY run_id, repo_id;

-- repos: the latest history row of every repo, by the start of its run (so runs stored out of
-- order still leave the newest metadata). When that row has no config_hash (the fetch failed)
-- but its sha is known, the config at that pinned sha is the one an earlier run fetched; and
-- when it has no config_parts (not fetched tonight: unchanged in a crawl, or failed), the parts
-- of the config an earlier run fetched at that sha.
CREATE OR REPLACE TEMP TABLE fresh_repos AS
WITH ranked AS (
    SELECT h.*, r.started
    FROM repo_history AS h JOIN runs AS r USING (run_id)
),
latest AS (
    SELECT * FROM ranked
    QUALIFY row_number() OVER (PARTITION BY repo_id ORDER BY started DESC, run_id DESC) = 1
),
known AS (
    SELECT repo_id, sha, arg_max(config_hash, started) AS config_hash
    FROM ranked WHERE sha IS NOT NULL AND config_hash IS NOT NULL
    GROUP BY repo_id, sha
),
known_parts AS (
    SELECT repo_id, sha, arg_max(config_parts, started) AS config_parts
    FROM ranked WHERE sha IS NOT NULL AND config_parts IS NOT NULL
    GROUP BY repo_id, sha
)
SELECT l.repo_id, l.sha, l.last_modified, l.downloads, l.likes, l.gated, l.license, l.pipeline_tag,
       coalesce(l.config_hash, k.config_hash) AS config_hash,
       l.hub_params, l.hub_params_by_dtype,
       coalesce(l.config_parts, p.config_parts) AS config_parts
FROM latest AS l
LEFT JOIN known AS k ON k.repo_id = l.repo_id AND k.sha = l.sha
LEFT JOIN known_parts AS p ON p.repo_id = l.repo_id AND p.sha = l.sha;

DELETE FROM repos
WHERE repo_id IN (SELECT repo_id FROM (SELECT * FROM repos EXCEPT SELECT * FROM temp.fresh_repos));
INSERT INTO repos BY NAME
SELECT * FROM (SELECT * FROM temp.fresh_repos EXCEPT SELECT * FROM repos)
ORDER BY repo_id;
DROP TABLE temp.fresh_repos;
