-- What a catalogue (the file, or a lake as the default catalog) already holds, for the flow's
-- plan stage: ('spec', config_hash) for each spec at $census measured by transformers
-- $transformers and torch $torch, and ('priced', config_hash) for each config priced at those
-- and $records at every setting of $grid (a list of setting_ids, tonight's grid). The libraries
-- are part of a spec's identity: a spec measured by another transformers or torch is not held,
-- and the flow censuses the config again. $transformers or $torch NULL matches any library.
-- full_prices has one row per (kind, setting) of a priced config, so a config
-- is priced at the grid when all of the grid's settings appear among its rows; one priced under
-- an older grid that lacks some of them is not, and the flow prices its stored spec again. A
-- spec with routed experts (num_experts above 1: catalogue/records/settings.py `routed_experts`)
-- is priced at $overload's settings too (settings.yaml `overload`), and is not priced until it
-- holds them all; another spec needs none of them. A
-- setting the config cannot be laid out at (infeasible_settings) counts as priced: it has no prices.
-- A price without its switch_costs row or its op_costs rows, or a config without op_prices rows
-- (stored before the catalogue had them), is not priced: the flow prices it again and the store
-- adds them (sql/steps/merge.sql).
SELECT 'spec' AS held, config_hash FROM specs
WHERE census_version = $census
  AND ($transformers IS NULL OR transformers_version = $transformers) AND ($torch IS NULL OR torch_version = $torch)
UNION ALL
SELECT 'priced', config_hash
FROM (SELECT config_hash, census_version, transformers_version, torch_version, records_version, setting_id FROM full_prices AS p
      WHERE EXISTS (SELECT 1 FROM switch_costs AS c WHERE c.mask = -1 AND c.config_hash = p.config_hash
                    AND c.census_version = p.census_version AND c.transformers_version = p.transformers_version
                    AND c.torch_version = p.torch_version AND c.records_version = p.records_version
                    AND c.setting_id = p.setting_id AND c.kind = p.kind)
        AND EXISTS (SELECT 1 FROM op_costs AS o WHERE o.config_hash = p.config_hash
                    AND o.census_version = p.census_version AND o.transformers_version = p.transformers_version
                    AND o.torch_version = p.torch_version AND o.records_version = p.records_version
                    AND o.setting_id = p.setting_id AND o.kind = p.kind)
      UNION ALL
      SELECT config_hash, census_version, transformers_version, torch_version, records_version, setting_id FROM infeasible_settings)
WHERE census_version = $census AND records_version = $records
  AND list_contains(list_concat($grid::VARCHAR[], $overload::VARCHAR[]), setting_id)
  AND ($transformers IS NULL OR transformers_version = $transformers) AND ($torch IS NULL OR torch_version = $torch)
  AND config_hash IN (SELECT config_hash FROM op_prices
                      WHERE census_version = $census AND records_version = $records
                        AND ($transformers IS NULL OR transformers_version = $transformers) AND ($torch IS NULL OR torch_version = $torch))
GROUP BY config_hash
HAVING count(DISTINCT setting_id) FILTER (WHERE list_contains($grid::VARCHAR[], setting_id)) = len($grid::VARCHAR[])
   AND (count(DISTINCT setting_id) FILTER (WHERE list_contains($overload::VARCHAR[], setting_id)) = len($overload::VARCHAR[])
        OR config_hash NOT IN (SELECT config_hash FROM specs
                               WHERE census_version = $census AND num_experts > 1
                                 AND ($transformers IS NULL OR transformers_version = $transformers)
                                 AND ($torch IS NULL OR torch_version = $torch)));
