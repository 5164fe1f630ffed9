-- Copy every row of a spec table (specs, kinds, stack, measured) or a price table of a
-- published catalogue stored before specs recorded the libraries that measured them (attached
-- as `source`) into a rebuilt one, column by column name, adding transformers_version and
-- torch_version. Before then a config was censused on the first night that listed it at a
-- census version (later nights carried it, and Prefect's cache answered only on the same
-- libraries), so its libraries are that night's: the earliest run by start (then run_id) whose
-- repo_history names the config_hash, at the row's census version. A row no stored night
-- explains gets 'unrecorded'; a night on any library censuses such a config again.
INSERT INTO {{ identifier(table) }} ({{ identifiers(columns) }}, transformers_version, torch_version)
SELECT {{ identifiers(columns) }},
       coalesce(m.libraries.transformers, 'unrecorded'), coalesce(m.libraries.torch, 'unrecorded')
FROM {{ identifier(source) }}.{{ identifier(table) }}
LEFT JOIN (SELECT h.config_hash, r.census_version,
                  arg_min({'transformers': r.transformers_version, 'torch': r.torch_version}, (r.started, r.run_id)) AS libraries
           FROM {{ identifier(source) }}.repo_history AS h JOIN {{ identifier(source) }}.runs AS r USING (run_id)
           WHERE h.config_hash IS NOT NULL
           GROUP BY ALL) AS m USING (config_hash, census_version);
