-- Table stack: the layer stack of a spec as run-length groups, position 0 first.
-- Key: (config_hash, census_version, position).
CREATE TABLE IF NOT EXISTS stack (
    config_hash    VARCHAR NOT NULL,
    census_version VARCHAR NOT NULL,
    position       SMALLINT NOT NULL,
    kind           VARCHAR NOT NULL,
    count          INTEGER NOT NULL,
    PRIMARY KEY (config_hash, census_version, position)
);
