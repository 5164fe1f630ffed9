-- View chosen_settings: the settings of the grid a per-setting question asks about. Each of
-- stack, seq_length, micro_batch, tp, cp and dropless_tok_factor is the variable of that name
-- (SET VARIABLE, or `speccat query -p`), or the grid's default from setting_defaults where it is
-- unset: even expert loads (1) unless a routing skew the night stores is asked for
-- (settings.yaml `overload`: 1.25, 1.5 or 2, priced for specs with routed experts only). The one
-- lookup the per-setting queries and `speccat show` share.
-- Grain: one row per matching setting (the other fields of the grid may leave several).
-- Columns: those of the settings table:
--   setting_id           id      the setting: a hash of its fields
--   stack                code    the training stack priced: transformers or megatron
--   seq_length           tokens  sequence length of one micro-batch
--   micro_batch          count   sequences per micro-batch
--   tp                   count   tensor-parallel ranks
--   cp                   count   context-parallel ranks
--   sequence_parallel    flag    sequence parallelism with tensor parallelism
--   flash_attention      flag    a fused attention kernel (no saved scores)
--   cp_algo              code    the context-parallel algorithm: ring or ulysses
--   dtype                code    the compute dtype: bf16, fp16 or fp32
--   in_flight            count   micro-batches in flight at once
--   param_casts          flag    casts of parameters are kept for backward
--   grouped_gemm         flag    MoE experts run as one grouped GEMM
--   dropless_tok_factor  ratio   MoE tokens per expert against the even share, when dropless
--   capacity_factor      ratio   MoE expert capacity against the even share, otherwise
CREATE OR REPLACE VIEW chosen_settings AS
SELECT * FROM settings
WHERE stack = coalesce(getvariable('stack')::VARCHAR, (SELECT stack FROM setting_defaults))
  AND seq_length = coalesce(getvariable('seq_length'), (SELECT seq_length FROM setting_defaults))
  AND micro_batch = coalesce(getvariable('micro_batch'), (SELECT micro_batch FROM setting_defaults))
  AND tp = coalesce(getvariable('tp'), (SELECT tp FROM setting_defaults))
  AND cp = coalesce(getvariable('cp'), (SELECT cp FROM setting_defaults))
  AND dropless_tok_factor = coalesce(getvariable('dropless_tok_factor'), (SELECT dropless_tok_factor FROM setting_defaults));
