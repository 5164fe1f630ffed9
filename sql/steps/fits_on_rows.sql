-- The rows of a table with a config_hash column that belong to the specs a publish answers the
-- table fits_on for, written once as Parquet files partitioned by the batch each spec is
-- answered in (FOLDER/fits_on_batch=K/*.parquet); `batches` is a relation of (config_hash,
-- fits_on_batch). One scan of the table for the whole publish: a query per batch scanned it once
-- a batch, which grew with the square of the specs (catalogue/store/fits_on_batches.py).
COPY (SELECT t.*, b.fits_on_batch FROM {{ identifier(table) }} AS t JOIN {{ identifier(batches) }} AS b USING (config_hash))
TO {{ literal(path) }} (FORMAT parquet, PARTITION_BY (fits_on_batch));
