-- View spec_params: the parameters of a whole model: embedding, output and final norm, what the
-- text path reads outside its layers beside them (embedding_extra, head_extra; 0 where a spec from
-- before them lacks them), plus every layer's (layers of each kind x the parameters of one layer of it).
-- Grain: one row per (config_hash, census_version, transformers_version, torch_version) whose spec states its parameters.
-- Columns:
--   config_hash     id       the config
--   census_version  version  the spec's census version
--   transformers_version  version  the transformers package that measured the spec
--   torch_version   version  the torch package that measured the spec
--   params          count    parameters of the whole model
CREATE OR REPLACE VIEW spec_params AS
SELECT s.config_hash, s.census_version, s.transformers_version, s.torch_version,
       ((s.spec -> 'params' ->> 'embedding')::BIGINT
         + (s.spec -> 'params' ->> 'output')::BIGINT
         + (s.spec -> 'params' ->> 'final_norm')::BIGINT
         + coalesce((s.spec -> 'params' ->> 'embedding_extra')::BIGINT, 0)
         + coalesce((s.spec -> 'params' ->> 'head_extra')::BIGINT, 0)
         + sum(k.layers * (k.params_attention + k.params_ffn_routed + k.params_ffn_shared
                           + k.params_ffn_router + k.params_ffn_dense + k.params_norm + k.params_other))
       )::BIGINT AS params
FROM specs AS s JOIN kinds AS k USING (config_hash, census_version, transformers_version, torch_version)
WHERE (s.spec -> 'params') IS NOT NULL
GROUP BY s.config_hash, s.census_version, s.transformers_version, s.torch_version, s.spec;
