-- Report query frontier: the frontier of every repo the report draws (the relation report_repos) at one setting, with the framework flags that
-- give each class (the view frontier_flags, filtered on the variable setting_id so the scan of
-- the prices reads that setting only), walked from no recompute to full recompute.
-- Grain: one row per (repo_id, kind, frontier class) at the setting.
-- Columns: repo_id, kind, layers_count, the setting's readable columns (stack,
-- seq_length_tokens, micro_batch_count, tp_ranks, cp_ranks, sequence_parallel, flash_attention,
-- dtype), mask, switch_set, n_equivalent_count, equivalents, kept_bytes, saved_bytes,
-- saved_pct, recompute_flops, overhead_pct, flags, no_framework: as the view states them.
SELECT repo_id, kind, layers_count, stack, seq_length_tokens, micro_batch_count, tp_ranks, cp_ranks,
       sequence_parallel, flash_attention, dtype, mask, switch_set, n_equivalent_count, equivalents,
       kept_bytes, saved_bytes, saved_pct, recompute_flops, overhead_pct, flags, no_framework
FROM frontier_flags
SEMI JOIN report_repos USING (repo_id)
WHERE setting_id = getvariable('setting_id')
ORDER BY repo_id, kind, kept_bytes DESC, overhead_pct, mask;
