-- View priced_vs_measured: per layer kind and measurement point, the bytes per token the
-- records price for one layer next to the bytes per token the census measured there. The
-- points are the census's own setting (`census`: its sequence length, one rank, nothing
-- recomputed) and those it measures besides (census/across.yaml): a second sequence length,
-- a context-parallel rank (`cp 2`), simulated tensor-parallel ranks with sequence parallelism
-- off (`tp 2`, `tp 8`), and switch sets recomputed through torch's selective-checkpoint API
-- (`recompute <switch>`, `recompute all`). Both describe the `transformers` stack, one
-- micro-batch. Covers every version stored. A ratio more than 0.5% from 1 names its cause.
-- At a switch-set point the measurement runs through torch's selective-checkpoint API, whose
-- cache holds a saved call's whole output; what it holds beyond plain autograd (the census's
-- op `cached`) is the API's, not the stack's: it is shown apart and not in measured_per_token.
-- Beside the bytes, the FLOPs of the layer's forward: costs.yaml's price at the point's setting
-- (what full recompute re-runs) and, at the point `census`, what torch's FlopCounterMode counted
-- in the census's forward (census/measure/flops.py); NULL where the census counted none (points across
-- settings, specs of census version 8 and before). A FLOP ratio more than 2% (the records'
-- tolerance) from 1 names its cause; it refuses nothing. At the point `census`, the layer's
-- backward peak as the census measured it (census/measure/backward_peak.py): the most bytes
-- alive at any moment of its backward beyond those alive when it began (its saves and the
-- gradient it receives among them), beside the records' price of the working set it measured
-- there (records.yaml working_set: the tensors alive at that moment, by width and dtype, each
-- width held per rank as its class says); a ratio more than 0.5% from 1 names its cause.
-- Grain: one row per (config_hash, census_version, transformers_version, torch_version, records_version, kind, point).
-- Columns:
--   config_hash             id           the config
--   census_version          version      the spec's census version
--   transformers_version    version      the transformers package that measured the spec
--   torch_version           version      the torch package that measured the spec
--   records_version         version      the prices' records version
--   kind                    text         the layer kind
--   point                   text         the measurement point
--   seq_length              tokens       the point's sequence length
--   tp                      count        the point's tensor-parallel ranks
--   cp                      count        the point's context-parallel ranks
--   sequence_parallel       flag         whether the point's tp ranks split the sequence
--   recompute               list         the switches the point recomputes
--   attention_impl          text         the attention implementation the census ran
--   experts_impl            text         the experts implementation it ran (NULL when dense)
--   priced_per_token        bytes/token  the records' price of one layer at the point, per token of its sequence
--   measured_per_token      bytes/token  what the layer kept at the point, per token of its sequence (op cached left out)
--   unattributed_per_token  bytes/token  the part of it no op claims (op `other`)
--   cached_per_token        bytes/token  what the selective-checkpoint cache holds beyond plain autograd (op `cached`)
--   ratio                   ratio        priced_per_token / measured_per_token
--   cause                   text         why the ratio is more than 0.5% from 1 (NULL within 0.5%)
--   priced_forward_flops    flops        costs.yaml's FLOPs of one layer's forward at the point, one sequence
--   measured_forward_flops  flops        FlopCounterMode's FLOPs of the layer's forward in the census, one sequence (NULL but at `census`)
--   forward_flops_ratio     ratio        priced_forward_flops / measured_forward_flops
--   forward_flops_cause     text         why forward_flops_ratio is more than 2% from 1 (NULL within 2%, or with nothing counted)
--   measured_backward_peak_per_token  bytes/token  the layer's backward peak in the census, per token of its sequence (NULL but at `census`, and before census version 17)
--   priced_backward_peak_per_token    bytes/token  the records' price of the working set at the point, per token (NULL before census version 18)
--   backward_peak_ratio               ratio        priced_backward_peak_per_token / measured_backward_peak_per_token
--   backward_peak_cause               text         why backward_peak_ratio is more than 0.5% from 1 (NULL within 0.5%, or with nothing measured)
CREATE OR REPLACE VIEW priced_vs_measured AS
WITH m AS (
    SELECT config_hash, census_version, transformers_version, torch_version, kind, point,
           any_value(seq_length) AS seq_length, any_value(tp) AS tp, any_value(cp) AS cp,
           any_value(sequence_parallel) AS sequence_parallel, any_value(recompute) AS recompute,
           any_value(attention_impl) AS attention_impl,
           any_value(experts_impl) AS experts_impl,
           sum(bytes_per_token) FILTER (WHERE op <> 'cached') AS measured_per_token,
           sum(bytes_per_token) FILTER (WHERE op = 'other') AS unattributed_per_token,
           sum(bytes_per_token) FILTER (WHERE op = 'cached') AS cached_per_token,
           any_value(forward_flops) AS measured_forward_flops,
           any_value(backward_peak) / any_value(seq_length) AS measured_backward_peak_per_token
    FROM measured GROUP BY config_hash, census_version, transformers_version, torch_version, kind, point
),
r AS (
    SELECT m.*, p.records_version, p.priced_per_token,
           p.priced_per_token / nullif(m.measured_per_token, 0) AS ratio,
           p.forward_flops AS priced_forward_flops,
           p.forward_flops / nullif(m.measured_forward_flops, 0) AS forward_flops_ratio,
           p.backward_peak_per_token AS priced_backward_peak_per_token,
           p.backward_peak_per_token / nullif(m.measured_backward_peak_per_token, 0) AS backward_peak_ratio,
           coalesce(s.num_key_value_heads, s.num_attention_heads) AS kv_heads,
           s.spec -> 'variants' -> m.kind ->> 'index_topk' AS index_topk
    FROM m
    JOIN point_prices AS p USING (config_hash, census_version, transformers_version, torch_version, kind, point)
    JOIN specs AS s USING (config_hash, census_version, transformers_version, torch_version)
)
SELECT config_hash, census_version, transformers_version, torch_version, records_version, kind, point, seq_length, tp, cp, sequence_parallel,
       recompute, attention_impl, experts_impl, priced_per_token, measured_per_token, unattributed_per_token,
       cached_per_token, ratio,
       CASE WHEN abs(ratio - 1) <= 0.005 THEN NULL
            WHEN measured_per_token = 0 THEN 'census: nothing measured'
            WHEN coalesce(unattributed_per_token, 0) > 0.005 * measured_per_token
                THEN 'census: bytes no op claims (op other)'
            WHEN tp > kv_heads THEN 'tp > n_kv: kv heads replicated'
            ELSE 'records: no formula of this records version accounts for the difference'
       END AS cause,
       priced_forward_flops, measured_forward_flops, forward_flops_ratio,
       CASE WHEN measured_forward_flops IS NULL OR abs(forward_flops_ratio - 1) <= 0.02 THEN NULL
            WHEN measured_forward_flops = 0 THEN 'census: nothing ran at its setting'
            WHEN coalesce(index_topk, '0') <> '0' THEN 'records: the sparse-attention indexer''s scores are not priced'
            ELSE 'records: no formula of this costs version accounts for the difference'
       END AS forward_flops_cause,
       measured_backward_peak_per_token, priced_backward_peak_per_token, backward_peak_ratio,
       CASE WHEN backward_peak_ratio IS NULL OR abs(backward_peak_ratio - 1) <= 0.005 THEN NULL
            ELSE 'records: the working set holds widths this records version prices otherwise'
       END AS backward_peak_cause
FROM r;
