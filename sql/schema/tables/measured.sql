-- Table measured: the bytes per token autograd saved for each op of one layer of a kind, as
-- the census measured them (docs/census.md), with the sequence length and implementations it
-- ran. Bytes no op claims are booked to op `other`. Key: (config_hash, census_version, kind, op).
CREATE TABLE IF NOT EXISTS measured (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    kind            VARCHAR NOT NULL,
    op              op_name NOT NULL,
    bytes_per_token DOUBLE NOT NULL,
    seq_length      INTEGER NOT NULL,
    attention_impl  VARCHAR NOT NULL,
    experts_impl    VARCHAR,
    PRIMARY KEY (config_hash, census_version, kind, op)
);
