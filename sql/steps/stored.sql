-- What a catalogue (the file, or a lake as the default catalog) already holds, for the flow's
-- plan stage: ('spec', config_hash) for each spec at $census, and ('priced', config_hash) for
-- each config priced at $census and $records at every setting of $grid (a list of setting_ids,
-- tonight's grid). full_prices has one row per (kind, setting) of a priced config, so a config
-- is priced at the grid when all of the grid's settings appear among its rows; one priced under
-- an older grid that lacks some of them is not, and the flow prices its stored spec again. A
-- setting the config cannot be laid out at (infeasible_settings) counts as priced: it has no prices.
SELECT 'spec' AS held, config_hash FROM specs WHERE census_version = $census
UNION ALL
SELECT 'priced', config_hash
FROM (SELECT config_hash, census_version, records_version, setting_id FROM full_prices
      UNION ALL
      SELECT config_hash, census_version, records_version, setting_id FROM infeasible_settings)
WHERE census_version = $census AND records_version = $records AND list_contains($grid::VARCHAR[], setting_id)
GROUP BY config_hash
HAVING count(DISTINCT setting_id) = len($grid::VARCHAR[]);
