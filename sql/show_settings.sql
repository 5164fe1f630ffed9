-- `speccat show`: the settings of the grid that match the chosen fields.
-- Parameters: seq_length [4096], micro_batch [1], tp [1], cp [1].
SELECT * FROM settings
WHERE seq_length = coalesce(getvariable('seq_length'), 4096)
  AND micro_batch = coalesce(getvariable('micro_batch'), 1)
  AND tp = coalesce(getvariable('tp'), 1)
  AND cp = coalesce(getvariable('cp'), 1)
ORDER BY setting_id;
