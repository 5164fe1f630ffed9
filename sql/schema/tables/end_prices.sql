-- Table end_prices: what the model's ends keep for backward, per rank and micro-batch, at each
-- setting the config is priced at, as catalogue/records/ends.yaml prices them: the embedding's
-- output (the first layer's input) and its ids, the final norm, and the logits with the
-- loss (docs/planning.md). The layers' prices leave these out; the first pipeline stage holds
-- the embedding, the last the final norm and the logits. Key: (config_hash, census_version, transformers_version, torch_version,
-- records_version, setting_id), checked by sql/steps/checks.sql.
CREATE TABLE IF NOT EXISTS end_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    records_version VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    embedding       DOUBLE NOT NULL,  -- bytes
    final_norm      DOUBLE NOT NULL,  -- bytes
    logits          DOUBLE NOT NULL   -- bytes
);
