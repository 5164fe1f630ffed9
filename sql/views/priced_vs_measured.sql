-- View priced_vs_measured: per layer kind, the bytes per token the records price for one
-- layer with no recompute, next to the bytes per token autograd saved in the census. The
-- price is read at the setting the census measured at: the stack it runs (transformers), its
-- sequence length, one micro-batch, one rank (tp 1, cp 1). These are facts of the census's
-- measurement, not defaults: they do not follow setting_defaults. Covers every version stored.
-- A ratio more than 0.5% from 1 names its cause.
-- Grain: one row per (config_hash, census_version, records_version, kind, setting_id).
-- Columns:
--   config_hash             id           the config
--   census_version          version      the spec's census version
--   records_version         version      the prices' records version
--   kind                    text         the layer kind
--   setting_id              id           the setting the price is read at
--   seq_length              tokens       the sequence length the census measured at
--   attention_impl          text         the attention implementation the census ran
--   experts_impl            text         the experts implementation it ran (NULL when dense)
--   priced_per_token        bytes/token  the records' price of one layer, mask 0, per token
--   measured_per_token      bytes/token  what autograd saved for one layer, per token
--   unattributed_per_token  bytes/token  the part of it no op claims (op `other`)
--   ratio                   ratio        priced_per_token / measured_per_token
--   cause                   text         why the ratio is more than 0.5% from 1 (NULL within 0.5%)
CREATE OR REPLACE VIEW priced_vs_measured AS
WITH m AS (
    SELECT config_hash, census_version, kind,
           any_value(seq_length) AS seq_length,
           any_value(attention_impl) AS attention_impl,
           any_value(experts_impl) AS experts_impl,
           sum(bytes_per_token) AS measured_per_token,
           sum(bytes_per_token) FILTER (WHERE op = 'other') AS unattributed_per_token
    FROM measured GROUP BY config_hash, census_version, kind
)
SELECT m.config_hash, m.census_version, p.records_version, m.kind, s.setting_id, m.seq_length,
       m.attention_impl, m.experts_impl,
       p.total / (s.seq_length * s.micro_batch) AS priced_per_token,
       m.measured_per_token, m.unattributed_per_token,
       p.total / (s.seq_length * s.micro_batch) / nullif(m.measured_per_token, 0) AS ratio,
       CASE WHEN abs(p.total / (s.seq_length * s.micro_batch) / nullif(m.measured_per_token, 0) - 1) <= 0.005 THEN NULL
            WHEN m.measured_per_token = 0 THEN 'census: nothing measured'
            WHEN coalesce(m.unattributed_per_token, 0) > 0.005 * m.measured_per_token
                THEN 'census: bytes no op claims (op other)'
            ELSE 'records: no formula of this records version accounts for the difference'
       END AS cause
FROM m
JOIN settings AS s ON s.stack = 'transformers' AND s.seq_length = m.seq_length AND s.micro_batch = 1 AND s.tp = 1 AND s.cp = 1
JOIN layer_prices AS p ON p.config_hash = m.config_hash AND p.census_version = m.census_version
                      AND p.kind = m.kind AND p.setting_id = s.setting_id AND p.mask = 0;
