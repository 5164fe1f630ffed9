-- View latest_specs: every repo's spec at the latest night's census version, with the repo's
-- popularity and metadata (from repos) and the model's parameters (spec_params). A repo whose
-- config has no spec at that version (a failed fetch or census) is not listed. A repo the latest
-- night no longer lists (it left the source's top N) is kept, marked `listed = false`.
-- Grain: one row per repo_id.
-- Columns:
--   repo_id                  id       the Hub repo
--   downloads                count    the Hub's download count, as last listed (NULL from a snapshot)
--   likes                    count    the Hub's likes, as last listed
--   gated                    code     no, auto or manual (vocabulary list gating)
--   license                  text     the repo's license tag
--   pipeline_tag             text     the repo's pipeline tag
--   sha                      id       the commit the config was read at
--   last_modified            time     the repo's last modification, as last listed
--   model_type               text     the config's model_type
--   params                   count    parameters of the whole model (spec_params)
--   config_hash              id       the config (a hash of its architecture fields)
--   census_version           version  the spec's census version: the latest night's
--   transformers_version     version  the transformers package that measured the spec (the latest night's)
--   torch_version            version  the torch package that measured the spec (the latest night's)
--   name                     text     the spec's name
--   arch                     text     the architecture (transformers class) the census built
--   hidden_size              count    width of the residual stream
--   num_hidden_layers        count    layers in the stack
--   num_attention_heads      count    query heads
--   num_key_value_heads      count    key/value heads (NULL where the spec has none)
--   head_dim                 count    width of one head
--   intermediate_size        count    width of the dense MLP
--   vocab_size               count    tokens in the vocabulary
--   max_position_embeddings  tokens   the longest sequence the config declares
--   num_experts              count    routed experts (MoE)
--   num_experts_per_tok      count    experts each token is routed to
--   moe_intermediate_size    count    width of one expert's MLP
--   kv_lora_rank             count    rank of the compressed key/value projection (MLA)
--   q_lora_rank              count    rank of the compressed query projection (MLA)
--   sliding_window           tokens   the sliding attention window
--   tie_word_embeddings      flag     output projection shares the embedding's weights
--   built_as                 text     the transformers class the census built (a remote-code config's substitute)
--   listed                   flag     the latest night listed the repo (false: it was listed before, not any more)
CREATE OR REPLACE VIEW latest_specs AS
SELECT r.repo_id, r.downloads, r.likes, r.gated, r.license, r.pipeline_tag, r.sha, r.last_modified,
       c.model_type, p.params,
       s.* EXCLUDE (spec),
       r.repo_id IN (SELECT repo_id FROM repo_history WHERE run_id = (SELECT run_id FROM latest_run)) AS listed
FROM repos AS r
JOIN specs AS s ON s.config_hash = r.config_hash
               AND (s.census_version, s.transformers_version, s.torch_version)
                   = (SELECT (census_version, transformers_version, torch_version) FROM latest_run)
JOIN configs AS c ON c.config_hash = r.config_hash
LEFT JOIN spec_params AS p ON p.config_hash = s.config_hash AND p.census_version = s.census_version AND p.transformers_version = s.transformers_version AND p.torch_version = s.torch_version;
