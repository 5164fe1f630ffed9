-- `speccat show`: the settings of the grid that match the chosen stack, seq_length,
-- micro_batch, tp and cp (variables; each unset one is the grid's default, through the view
-- chosen_settings, which reads dropless_tok_factor too: even loads, unset).
SELECT * FROM chosen_settings
ORDER BY setting_id;
