-- Count one more publish into the lake: the row every publish rewrites (lake_epoch.sql).
UPDATE lake_epoch SET epoch = epoch + 1;
