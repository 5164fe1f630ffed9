-- Every row of a table: what a catalogue in memory copies whole of the published one (the
-- tables not kept per spec) to answer the table fits_on (catalogue/store/fits_on_batches.py).
SELECT * FROM {{ identifier(table) }};
