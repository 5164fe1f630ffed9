-- Every row of a table (or view): what `speccat export` splits into partitions in memory where
-- the table is small enough, and what a catalogue in memory copies whole of the published one to
-- answer the table fits_on (catalogue/store/fits_on_batches.py: the tables not kept per spec).
SELECT * FROM {{ identifier(table) }};
