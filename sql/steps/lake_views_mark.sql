-- Record the digest of the definitions the views were just created from (lake_views.sql).
DELETE FROM lake_views;
INSERT INTO lake_views VALUES ($digest);
