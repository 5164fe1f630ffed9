-- Table point_prices: the records' bytes per token of one layer of a kind, with no recompute
-- but what the point names, at each setting the census measured the kind at (the `point`s of
-- the table measured): the census's own, a second sequence length, context- and
-- tensor-parallel ranks, switch sets recomputed (catalogue/records/points.py). Priced from the
-- spec's dimensions and stated facts, never from the measured bytes. Key: (config_hash,
-- census_version, records_version, kind, point).
CREATE TABLE IF NOT EXISTS point_prices (
    config_hash      VARCHAR NOT NULL,
    census_version   VARCHAR NOT NULL,
    records_version  VARCHAR NOT NULL,
    kind             VARCHAR NOT NULL,
    point            VARCHAR NOT NULL,
    priced_per_token DOUBLE NOT NULL,  -- bytes per token of the setting's sequence
    PRIMARY KEY (config_hash, census_version, records_version, kind, point)
);
