-- Table fits_on_layouts: the parallel layouts the table fits_on tries, the latest night's (the
-- store replaces it when a night states them; catalogue/records/fits_on.py): per GPU count, each
-- layout that can be the best (of layouts differing only in ep and the ZeRO stage, ep 1 at the
-- highest stage: catalogue/records/candidates.py `leading`), numbered by `position` in the order
-- `speccat fit` numbers its layouts, at the grid setting of its tp and cp for each stack and
-- sequence length. Key: (gpus, position, setting_id).
CREATE TABLE IF NOT EXISTS fits_on_layouts (
    plan_version VARCHAR NOT NULL,   -- as fits_on_sizes'
    gpus         INTEGER NOT NULL,   -- dp · tp · pp · cp
    position     INTEGER NOT NULL,   -- the layout's place among the GPU count's, as `speccat fit` enumerates them
    dp           INTEGER NOT NULL,
    tp           INTEGER NOT NULL,
    pp           INTEGER NOT NULL,
    cp           INTEGER NOT NULL,
    ep           INTEGER NOT NULL,
    zero         INTEGER NOT NULL,   -- the ZeRO stage
    setting_id   VARCHAR NOT NULL,   -- the grid setting priced: its stack and sequence length, this tp and cp
    PRIMARY KEY (gpus, position, setting_id)
);
