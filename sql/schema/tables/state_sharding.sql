-- Table state_sharding: catalogue/records/states.yaml as rows, the latest night's (the store
-- replaces it at every publish): per training recipe, parameter group and model state
-- (weight, grad, optimizer), the bytes per parameter, the lowest ZeRO stage that partitions
-- the state over the group's data-parallel ranks (NULL: no stage does), and the group's two
-- divisors as powers of the layout's sizes: a rank holds 1 / (t^model_t · cp^model_cp ·
-- dp^model_dp · ep^model_ep · etp^model_etp) of the group's parameters, and a partitioned
-- state divides again by the data group t^data_t · cp^data_cp · dp^data_dp · ep^data_ep ·
-- etp^data_etp (t: tensor, cp: context, dp: data, ep: expert, etp: expert-tensor parallel).
-- The view rank_fits reads it. Key: (recipe, "group", state).
CREATE TABLE IF NOT EXISTS state_sharding (
    recipe          VARCHAR NOT NULL,
    default_recipe  BOOLEAN NOT NULL,   -- states.yaml's default recipe
    "group"         VARCHAR NOT NULL,
    state           VARCHAR NOT NULL,
    bytes_per_param DOUBLE NOT NULL,
    sharded_from    INTEGER,
    model_cp        INTEGER NOT NULL,
    model_dp        INTEGER NOT NULL,
    model_ep        INTEGER NOT NULL,
    model_etp       INTEGER NOT NULL,
    model_t         INTEGER NOT NULL,
    data_cp         INTEGER NOT NULL,
    data_dp         INTEGER NOT NULL,
    data_ep         INTEGER NOT NULL,
    data_etp        INTEGER NOT NULL,
    data_t          INTEGER NOT NULL,
    PRIMARY KEY (recipe, "group", state)
);
