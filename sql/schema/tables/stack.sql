-- Table stack: the layer stack of a spec as run-length groups, position 0 first.
-- Key: (config_hash, census_version, transformers_version, torch_version, position).
CREATE TABLE IF NOT EXISTS stack (
    config_hash    VARCHAR NOT NULL,
    census_version VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    position       SMALLINT NOT NULL,
    kind           VARCHAR NOT NULL,
    count          INTEGER NOT NULL,
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, position)
);
