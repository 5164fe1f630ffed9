-- A lake's record of the schema its views were created over: a digest of the tables' and the
-- views' definitions (catalogue/store/lake.py). A publish recreates the views only when tonight's
-- digest differs, so a night that changes no definition adds no view versions to the catalog.
CREATE TABLE IF NOT EXISTS lake_views (digest VARCHAR NOT NULL);
