-- Report query setting: one setting of the grid by its readable fields (the view
-- chosen_settings, which reads the variables stack, seq_length, micro_batch, tp, cp and
-- dropless_tok_factor, each the grid's default where unset).
-- Grain: one row per matching setting (one, for a setting of the grid).
-- Columns: those of the settings table (setting_id, stack, seq_length, micro_batch, tp, cp,
-- sequence_parallel, flash_attention, cp_algo, dtype, in_flight, ...).
SELECT * FROM chosen_settings;
