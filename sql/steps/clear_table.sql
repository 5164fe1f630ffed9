-- Delete every row of a table of a catalogue in memory: a batch's rows, once its fits_on rows
-- are answered, before the next batch's are copied in (catalogue/store/fits_on_batches.py).
DELETE FROM {{ identifier(table) }};
