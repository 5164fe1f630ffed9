-- Report query fits: what fits, from the view repo_fits_on: per repo the report draws (the relation report_repos), on the grid's default
-- stack, each GPU count, sequence length and memory size the table fits_on answers, the layout
-- and switch set `speccat fit` lists first (fits false where nothing fits).
-- Grain: one row per (repo_id, gpus, seq_length, gpu_mem_gib).
-- Columns:
--   repo_id              id       the Hub repo
--   gpus                 count    dp · tp · pp · cp
--   seq_length           tokens   sequence length
--   gpu_mem_gib          count    the memory a rank may hold, in GiB
--   fits                 flag     some layout and switch set fit
--   dp, tp, pp, cp, ep   count    the best layout's ranks
--   zero                 code     its ZeRO stage
--   switch_set           code     its switch set
--   total_bytes          bytes    what its fullest rank holds
--   overhead_pct         percent  its recompute time over the layers' forward + backward time
SELECT repo_id, gpus, seq_length, gpu_mem_gib, fits, dp, tp, pp, cp, ep, zero, switch_set, total_bytes, overhead_pct
FROM repo_fits_on
SEMI JOIN report_repos USING (repo_id)
WHERE stack = (SELECT stack FROM setting_defaults)
ORDER BY repo_id, gpus, seq_length, gpu_mem_gib;
