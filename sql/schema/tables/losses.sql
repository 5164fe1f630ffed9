-- Table losses: the loss kernels of catalogue/records/ends.yaml as rows, the latest night's (the
-- store replaces it at every publish). loss_prices prices each; the planner's SQL reads the
-- variable `loss`, else the default: the model's own loss, the one the census measures.
-- Key: loss.
CREATE TABLE IF NOT EXISTS losses (
    loss          VARCHAR PRIMARY KEY,
    chunk_tokens  DOUBLE,            -- tokens per chunk, where the kernel states one
    is_default    BOOLEAN NOT NULL,  -- the model's own loss
    source        VARCHAR NOT NULL   -- where the kernel's behaviour is documented
);
