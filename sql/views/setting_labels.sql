-- View setting_labels: each setting of the grid in words beside its hash: every field as
-- field=value, in the settings file's order (the form `speccat price` prints as its setting),
-- so a reader of a query's rows sees which stack, sequence length, tp and kernel a price is for
-- without joining the settings table. The views and queries that print a setting read it here.
-- Grain: one row per setting.
-- Columns:
--   setting_id     id    the setting (a hash of its fields)
--   setting_label  text  every field of the setting as field=value, in settings.yaml's order
CREATE OR REPLACE VIEW setting_labels AS
SELECT setting_id,
       concat_ws(' ', 'stack=' || stack, 'seq_length=' || seq_length, 'micro_batch=' || micro_batch, 'tp=' || tp, 'cp=' || cp,
                 'sequence_parallel=' || sequence_parallel, 'flash_attention=' || flash_attention, 'cp_algo=' || cp_algo,
                 'dtype=' || dtype, 'in_flight=' || in_flight, 'param_casts=' || param_casts, 'grouped_gemm=' || grouped_gemm,
                 'dropless_tok_factor=' || dropless_tok_factor, 'capacity_factor=' || capacity_factor) AS setting_label
FROM settings;
