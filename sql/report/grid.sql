-- Report query grid: the settings the index's whole-rank memory is read at: every setting of
-- the settings table at cp 1 whose other fields are the grid's defaults (setting_defaults), per
-- stack, sequence length and tensor-parallel size. A setting that left
-- the grid has no prices at the latest versions, so the views return nothing for it.
-- Grain: one row per (stack, seq_length, tp).
-- Columns:
--   setting_id   id      the setting
--   stack        code    the training stack priced
--   seq_length   tokens  sequence length
--   tp           count   tensor-parallel ranks
SELECT s.setting_id, s.stack, s.seq_length, s.tp
FROM settings AS s, setting_defaults AS d
WHERE s.cp = 1 AND s.micro_batch = d.micro_batch AND s.sequence_parallel = d.sequence_parallel
  AND s.flash_attention = d.flash_attention AND s.cp_algo = d.cp_algo AND s.dtype = d.dtype
  AND s.in_flight = d.in_flight AND s.param_casts = d.param_casts AND s.grouped_gemm = d.grouped_gemm
  AND s.dropless_tok_factor = d.dropless_tok_factor AND s.capacity_factor = d.capacity_factor
ORDER BY s.stack, s.seq_length, s.tp;
