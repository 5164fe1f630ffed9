-- View repo_infeasible: the settings at which a repo's model cannot be laid out, and why
-- (catalogue/records/layouts.yaml), at the latest night's census and records versions. The
-- repo has no price at those settings (repo_prices has no row there).
-- Grain: one row per (repo_id, setting_id, kind that cannot be laid out).
-- Columns:
--   repo_id              id      the Hub repo
--   config_hash          id      the repo's config
--   setting_id           id      the setting (settings)
--   seq_length           tokens  the setting's sequence length
--   micro_batch          count   sequences per micro-batch
--   tp                   count   tensor-parallel ranks
--   cp                   count   context-parallel ranks
--   dropless_tok_factor  ratio   MoE tokens per expert against the even share (settings.yaml `overload`: routed experts only)
--   kind                 code    the layer kind that cannot be laid out
--   rule                 code    the rule of layouts.yaml that refuses it
--   message              text    why, with the numbers
CREATE OR REPLACE VIEW repo_infeasible AS
SELECT r.repo_id, r.config_hash, i.setting_id, s.seq_length, s.micro_batch, s.tp, s.cp, s.dropless_tok_factor, i.kind, i.rule, i.message
FROM repos AS r
JOIN infeasible_settings AS i ON i.config_hash = r.config_hash
JOIN latest_run AS v ON v.census_version = i.census_version AND v.transformers_version = i.transformers_version AND v.torch_version = i.torch_version AND v.records_version = i.records_version
JOIN settings AS s ON s.setting_id = i.setting_id;
