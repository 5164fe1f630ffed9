-- The digest of the definitions the lake's views were last created from (lake_views.sql).
SELECT digest FROM lake_views;
