-- View rank_fits_layout: the one parallel layout the view rank_fits prices at, read from the
-- session's variables, each with its default: dp [1], pp [1], ep [1], zero [0] (the ZeRO
-- stage), vpp [1] (virtual stages per rank), etp [the setting's tp], recipe [states.yaml's
-- default], budget_gib [80] and accelerator [the accelerators table's default]
-- (SET VARIABLE pp = 4), and setting_id [every setting]. tp, cp, the sequence length and the
-- micro-batch are each setting's.
-- Grain: one row.
-- Columns:
--   layout                 id       the layout's number: 0
--   dp                     count    data-parallel ranks
--   pp                     count    pipeline stages
--   ep                     count    expert-parallel ranks
--   zero                   code     the ZeRO stage
--   vpp                    count    virtual stages per rank
--   etp                    count    expert-tensor-parallel ranks (NULL: the setting's tp)
--   setting_id             id       the variable setting_id: that setting alone; NULL (unset): every setting (tp, cp, the sequence length and the micro-batch each setting's)
--   recipe                 code     the training recipe (state_sharding)
--   budget_bytes           bytes    the memory a rank may hold: budget_gib GiB
--   accelerator            code     the accelerator recompute time is estimated on
--   only_fitting           flag     false: every layout's rows, fitting or not
CREATE OR REPLACE VIEW rank_fits_layout AS
SELECT 0 AS layout,
       coalesce(getvariable('dp'), 1) AS dp, coalesce(getvariable('pp'), 1) AS pp,
       coalesce(getvariable('ep'), 1) AS ep, coalesce(getvariable('zero'), 0) AS zero,
       coalesce(getvariable('vpp'), 1) AS vpp, getvariable('etp') AS etp,
       getvariable('setting_id')::VARCHAR AS setting_id,
       coalesce(getvariable('recipe'), (SELECT any_value(recipe) FROM state_sharding WHERE default_recipe)) AS recipe,
       coalesce(getvariable('budget_gib'), 80) * 2 ** 30 AS budget_bytes,
       coalesce(getvariable('accelerator'), (SELECT accelerator FROM accelerators WHERE default_accelerator)) AS accelerator,
       false AS only_fitting;
