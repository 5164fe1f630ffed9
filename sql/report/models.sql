-- Report query models: every repo with a spec at the latest versions (the view latest_specs),
-- most downloaded first: the index's rows and each model page's header, of the first
-- report/pages.yaml model_pages of them (report/data.py registers those as report_repos).
-- Grain: one row per repo_id.
-- Columns:
--   repo_id            id       the Hub repo
--   config_hash        id       its config
--   model_type         text     the config's model_type (the family)
--   arch               text     the transformers class the census built
--   params             count    parameters of the whole model
--   num_hidden_layers  count    layers in the stack
--   hidden_size        count    width of the residual stream
--   num_experts        count    routed experts (NULL when dense)
--   downloads          count    the Hub's download count (NULL from a snapshot)
--   listed             flag     the latest night listed the repo
SELECT repo_id, config_hash, model_type, arch, params, num_hidden_layers, hidden_size, num_experts, downloads, listed
FROM latest_specs
ORDER BY downloads DESC NULLS LAST, repo_id;
