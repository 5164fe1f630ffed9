-- The rows of a table with a config_hash column that belong to the specs $config_hashes (a
-- list): what a catalogue in memory copies of the published one to answer the table fits_on a
-- batch of specs at a time (catalogue/store/fits_on_batches.py).
SELECT * FROM {{ identifier(table) }} WHERE config_hash IN (SELECT unnest($config_hashes::VARCHAR[]));
