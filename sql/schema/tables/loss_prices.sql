-- Table loss_prices: the model's `logits` end under each loss kernel of
-- catalogue/records/ends.yaml (eager, chunked, fused linear), per rank and micro-batch, at each
-- setting the config is priced at: what the head's input, the logits and the loss keep for
-- backward, and the most bytes the loss holds at once beyond that in its forward or backward
-- (docs/planning.md). end_prices' `logits` is the model's own loss's (losses.is_default).
-- Key: (config_hash, census_version, transformers_version, torch_version, records_version, setting_id, loss).
CREATE TABLE IF NOT EXISTS loss_prices (
    config_hash     VARCHAR NOT NULL,
    census_version  VARCHAR NOT NULL,
    transformers_version VARCHAR NOT NULL,  -- the transformers package that measured the spec
    torch_version        VARCHAR NOT NULL,  -- the torch package that measured the spec
    records_version VARCHAR NOT NULL,
    setting_id      VARCHAR NOT NULL,
    loss            VARCHAR NOT NULL,  -- a losses row
    kept_bytes      DOUBLE NOT NULL,   -- kept for backward
    working_bytes   DOUBLE NOT NULL,   -- held at once beyond what is kept, at the loss's peak
    PRIMARY KEY (config_hash, census_version, transformers_version, torch_version, records_version, setting_id, loss)
);
