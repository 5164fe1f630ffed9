-- Report query curve: the settings of the memory curve the latest night priced (settings.yaml
-- `curve`: the settings the table op_prices holds at the latest versions), which the memory
-- plot and the bars of where the bytes go are drawn at.
-- Grain: one row per setting.
-- Columns:
--   setting_id   id      the setting
--   stack        code    the training stack priced
--   seq_length   tokens  sequence length
--   tp           count   tensor-parallel ranks
SELECT s.setting_id, s.stack, s.seq_length, s.tp
FROM settings AS s
WHERE s.setting_id IN (SELECT o.setting_id FROM op_prices AS o JOIN latest_run AS v USING (census_version, transformers_version, torch_version, records_version))
ORDER BY s.stack, s.seq_length, s.tp;
