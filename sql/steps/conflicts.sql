-- Rows of tonight's run whose key is already stored with different content. The store refuses
-- such a run (StoreError "conflict"): same key, different content means a version that should
-- have been bumped was not (a census change without a new census_version, a records or grid
-- change without a new hash), and silently keeping either row would be wrong.
-- Same catalogs as sql/steps/merge.sql: the target is the default catalog, tonight's rows `incoming`
-- and, for the prices, the Arrow tables staged_layer_prices, staged_full_prices and
-- staged_switch_costs. A price
-- group (config, census and records version, setting) is stored when its full_prices rows are.
--
-- `configs` is not checked: config_hash leaves out names, versions and token ids, so repos
-- sharing a hash have different raw JSON. The catalogue keeps the first config it stored for a
-- hash (sql/steps/merge.sql), the raw JSON of one representative repo.
WITH stored_groups AS (
    SELECT DISTINCT config_hash, census_version, transformers_version, torch_version, records_version, setting_id FROM staged_full_prices AS n
    WHERE EXISTS (SELECT 1 FROM full_prices AS o WHERE o.config_hash = n.config_hash
                  AND o.census_version = n.census_version AND o.transformers_version = n.transformers_version AND o.torch_version = n.torch_version AND o.records_version = n.records_version
                  AND o.setting_id = n.setting_id)
)
SELECT 'specs' AS tbl, config_hash || ' @ ' || census_version AS key
FROM (SELECT * FROM incoming.specs EXCEPT SELECT * FROM specs) AS n
WHERE (config_hash, census_version, transformers_version, torch_version) IN (SELECT (config_hash, census_version, transformers_version, torch_version) FROM specs)
UNION ALL
SELECT DISTINCT 'kinds', config_hash || ' @ ' || census_version
FROM (SELECT * FROM incoming.kinds EXCEPT SELECT * FROM kinds) AS n
WHERE (config_hash, census_version, transformers_version, torch_version) IN (SELECT (config_hash, census_version, transformers_version, torch_version) FROM kinds)
UNION ALL
SELECT DISTINCT 'stack', config_hash || ' @ ' || census_version
FROM (SELECT * FROM incoming.stack EXCEPT SELECT * FROM stack) AS n
WHERE (config_hash, census_version, transformers_version, torch_version) IN (SELECT (config_hash, census_version, transformers_version, torch_version) FROM stack)
UNION ALL
SELECT DISTINCT 'measured', config_hash || ' @ ' || census_version
FROM (SELECT * FROM incoming.measured EXCEPT SELECT * FROM measured) AS n
WHERE (config_hash, census_version, transformers_version, torch_version) IN (SELECT (config_hash, census_version, transformers_version, torch_version) FROM measured)
UNION ALL
SELECT 'settings', setting_id
FROM (SELECT * FROM incoming.settings EXCEPT SELECT * FROM settings) AS n
WHERE setting_id IN (SELECT setting_id FROM settings)
UNION ALL
SELECT 'switch_sets', mask::VARCHAR
FROM (SELECT * FROM incoming.switch_sets EXCEPT SELECT * FROM switch_sets) AS n
WHERE mask IN (SELECT mask FROM switch_sets)
UNION ALL
SELECT DISTINCT 'layer_prices', config_hash || ' @ ' || census_version || ' / ' || records_version
FROM (SELECT * FROM staged_layer_prices WHERE config_hash IN (SELECT config_hash FROM stored_groups)
      EXCEPT SELECT * FROM layer_prices WHERE config_hash IN (SELECT config_hash FROM stored_groups)) AS n
WHERE (config_hash, census_version, transformers_version, torch_version, records_version, setting_id)
      IN (SELECT (config_hash, census_version, transformers_version, torch_version, records_version, setting_id) FROM stored_groups)
UNION ALL
SELECT DISTINCT 'full_prices', config_hash || ' @ ' || census_version || ' / ' || records_version
FROM (SELECT * FROM staged_full_prices WHERE config_hash IN (SELECT config_hash FROM stored_groups)
      EXCEPT SELECT * FROM full_prices WHERE config_hash IN (SELECT config_hash FROM stored_groups)) AS n
WHERE (config_hash, census_version, transformers_version, torch_version, records_version, setting_id)
      IN (SELECT (config_hash, census_version, transformers_version, torch_version, records_version, setting_id) FROM stored_groups)
UNION ALL
SELECT DISTINCT 'switch_costs', config_hash || ' @ ' || census_version || ' / ' || records_version
FROM (SELECT * FROM staged_switch_costs WHERE config_hash IN (SELECT config_hash FROM stored_groups)
      EXCEPT SELECT * FROM switch_costs WHERE config_hash IN (SELECT config_hash FROM stored_groups)) AS n
WHERE (config_hash, census_version, transformers_version, torch_version, records_version, setting_id)  -- a group whose costs are stored
      IN (SELECT (config_hash, census_version, transformers_version, torch_version, records_version, setting_id) FROM switch_costs
          WHERE mask = -1 AND config_hash IN (SELECT config_hash FROM stored_groups))
ORDER BY tbl, key;
