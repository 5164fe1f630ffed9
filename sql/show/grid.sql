-- `speccat show`, when the chosen fields match no single setting: the values chosen (each
-- variable, or the grid's default from setting_defaults) and the values the grid has.
SELECT coalesce(getvariable('stack')::VARCHAR, d.stack) AS stack,
       coalesce(getvariable('seq_length'), d.seq_length) AS seq_length,
       coalesce(getvariable('micro_batch'), d.micro_batch) AS micro_batch,
       coalesce(getvariable('tp'), d.tp) AS tp,
       coalesce(getvariable('cp'), d.cp) AS cp,
       (SELECT list(DISTINCT stack ORDER BY stack) FROM settings) AS grid_stack,
       (SELECT list(DISTINCT seq_length ORDER BY seq_length) FROM settings) AS grid_seq_length,
       (SELECT list(DISTINCT micro_batch ORDER BY micro_batch) FROM settings) AS grid_micro_batch,
       (SELECT list(DISTINCT tp ORDER BY tp) FROM settings) AS grid_tp,
       (SELECT list(DISTINCT cp ORDER BY cp) FROM settings) AS grid_cp
FROM setting_defaults AS d;
