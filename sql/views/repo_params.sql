-- View repo_params: each repo's census parameter count against the Hub's own count of its
-- safetensors weights, the difference, and why they differ: the cause of the first rule of
-- param_rules (catalogue/hub_params.yaml, the latest night's) whose every test holds, at the latest
-- night's census version and libraries. A repo is here when the Hub counted its weights (as last
-- listed) and its config has a spec stating its parameters; a cause `unexplained` is flagged: a
-- spec that disagrees with the repo's own weights.
-- Grain: one row per repo_id.
-- Columns:
--   repo_id              id       the Hub repo
--   sha                  id       the commit the Hub last listed it at
--   config_hash          id       the repo's config
--   census_params        count    parameters of the language model the census built (spec_params: embedding, output (0 when tied), final norm, every layer)
--   hub_params           count    the Hub's count of the repo's safetensors weights, as last listed
--   hub_dtypes           list     the dtypes the Hub counts parameters of, as last listed
--   config_parts         list     the repo's config parts its language model leaves out (vision_config, quantization_config, ...)
--   difference           count    hub_params − census_params
--   difference_pct       percent  the difference against census_params
--   cause                code     why they differ (vocabulary list param_cause)
--   rule                 id       the position in param_rules of the rule that states the cause
--   expected_difference  count    the difference that rule expects (NULL where it bounds none: a sign, or no test)
--   flagged              flag     no rule explains the difference (cause unexplained)
CREATE OR REPLACE VIEW repo_params AS
WITH census AS (
    SELECT p.config_hash, p.params AS census_params,
           (s.spec -> 'params' ->> 'embedding')::BIGINT AS embedding,
           (s.spec -> 'params' ->> 'output')::BIGINT = 0 AS tied,
           s.hidden_size::DOUBLE * s.hidden_size AS hidden_squared,
           l.largest_layer
    FROM spec_params AS p
    JOIN latest_run AS r USING (census_version, transformers_version, torch_version)
    JOIN specs AS s USING (config_hash, census_version, transformers_version, torch_version)
    JOIN (SELECT config_hash, census_version, transformers_version, torch_version,
                 max(params_attention + params_ffn_routed + params_ffn_shared + params_ffn_router
                     + params_ffn_dense + params_norm + params_other) AS largest_layer
          FROM kinds GROUP BY config_hash, census_version, transformers_version, torch_version) AS l
      USING (config_hash, census_version, transformers_version, torch_version)
),
listed AS (
    SELECT o.repo_id, o.sha, o.config_hash, o.hub_params, o.hub_params_by_dtype,
           coalesce(o.config_parts, []::VARCHAR[]) AS config_parts,
           -- the words of the part names, which a rule's config_parts test
           flatten(list_transform(coalesce(o.config_parts, []::VARCHAR[]), part -> string_split(lower(part), '_'))) AS part_words,
           c.census_params, c.embedding, c.tied, c.hidden_squared, c.largest_layer, g.config,
           o.hub_params - c.census_params AS difference
    FROM repos AS o
    JOIN census AS c USING (config_hash)
    JOIN configs AS g USING (config_hash)
    WHERE o.hub_params IS NOT NULL
),
tested AS (
    SELECT l.*, u.position, u.cause, u.difference AS test, u.tolerance * l.census_params AS slack,
           u.tied AS rule_tied, u.config_parts AS rule_parts, u.hub_dtypes AS rule_dtypes,
           -- the language config's counts the rule names, at its top or in its text_config
           list_sum([coalesce(try_cast(l.config ->> name AS DOUBLE), try_cast(l.config -> 'text_config' ->> name AS DOUBLE), 0)
                     FOR name IN u.config_counts]) AS counted,
           u.config_counts IS NULL AS uncounted,
           u.expected_embedding * l.embedding + u.expected_largest_layer * l.largest_layer
             + u.expected_hidden_squared * l.hidden_squared AS per_count
    FROM listed AS l CROSS JOIN param_rules AS u
),
expected AS (
    SELECT *, CASE WHEN test IN ('equals', 'at_most') THEN (CASE WHEN uncounted THEN 1 ELSE counted END) * per_count END AS expected
    FROM tested
),
held AS (
    SELECT * FROM expected
    WHERE (rule_tied IS NULL OR tied = rule_tied)
      AND (uncounted OR counted > 0)
      AND (rule_parts IS NULL OR list_has_any(part_words, rule_parts))
      AND (rule_dtypes IS NULL OR coalesce(list_has_any(map_keys(hub_params_by_dtype), rule_dtypes), false))
      AND CASE test
            WHEN 'equals' THEN abs(difference - expected) <= slack
            WHEN 'at_most' THEN difference > slack AND difference <= expected + slack
            WHEN 'positive' THEN difference > slack
            WHEN 'negative' THEN difference < -slack
            ELSE true
          END
    QUALIFY row_number() OVER (PARTITION BY repo_id ORDER BY position) = 1
)
SELECT repo_id, sha, config_hash, census_params, hub_params,
       list_sort(map_keys(hub_params_by_dtype)) AS hub_dtypes, config_parts,
       difference, round(100.0 * difference / census_params, 3) AS difference_pct,
       cause, position AS rule, round(expected)::BIGINT AS expected_difference,
       cause = 'unexplained' AS flagged
FROM held;
