-- Report query whole: whole-rank memory of every repo the report draws (the relation report_repos) at one layout and setting, under one
-- switch set (the view rank_fits, with its layout variables dp, pp and zero set, and filtered
-- on the variables setting_id and mask so it reads that setting and set only).
-- Grain: one row per repo_id.
-- Columns:
--   repo_id              id       the Hub repo
--   gpus_count           count    dp · tp · pp · cp
--   tp_ranks             count    tensor-parallel ranks
--   pp_ranks             count    pipeline stages
--   dp_ranks             count    data-parallel ranks
--   zero_stage           code     the ZeRO stage
--   seq_length_tokens    tokens   sequence length
--   mask                 id       the switch set; -1 for full recompute
--   switch_set           code     its name
--   total_bytes          bytes    what the fullest stage's rank holds
--   recompute_s_per_seq  seconds  the first stage's recompute per sequence on the default accelerator
SELECT repo_id, gpus_count, tp_ranks, pp_ranks, dp_ranks, zero_stage, seq_length_tokens, mask, switch_set,
       total_bytes, recompute_s_per_seq
FROM rank_fits
SEMI JOIN report_repos USING (repo_id)
WHERE setting_id = getvariable('setting_id') AND mask = getvariable('mask')
ORDER BY repo_id;
