-- The latest spec of every repo, most downloaded first, with its size and shape.
-- Parameters (SET VARIABLE name = value; all optional):
--   model_type  only repos of this model_type
SELECT repo_id, downloads, likes, model_type, arch, params,
       round(params / 1e9, 2) AS params_b,
       hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
       num_experts, num_experts_per_tok, config_hash
FROM latest_specs
WHERE getvariable('model_type') IS NULL OR model_type = getvariable('model_type')
ORDER BY downloads DESC NULLS LAST, repo_id;
