-- Views of the catalogue (DESIGN §4). Recreated at every publish, so they always match the
-- tables. Views named latest_* or repo_* read the latest run's census and records versions;
-- the others carry the version columns and cover every version stored.

-- The latest run (by start) and the one before it.
CREATE OR REPLACE VIEW latest_run AS
SELECT * FROM runs ORDER BY started DESC, run_id DESC LIMIT 1;

CREATE OR REPLACE VIEW previous_run AS
SELECT * FROM runs ORDER BY started DESC, run_id DESC LIMIT 1 OFFSET 1;

-- The settings of the grid matching the variables seq_length [4096], micro_batch [1], tp [1]
-- and cp [1] (set with SET VARIABLE, or `speccat query -p`): the one lookup the per-setting
-- queries and `speccat show` share.
CREATE OR REPLACE VIEW chosen_settings AS
SELECT * FROM settings
WHERE seq_length = coalesce(getvariable('seq_length'), 4096)
  AND micro_batch = coalesce(getvariable('micro_batch'), 1)
  AND tp = coalesce(getvariable('tp'), 1)
  AND cp = coalesce(getvariable('cp'), 1);

-- Whole-model bytes (DESIGN §3.5): the sum over the stack's kinds of layers x layer bytes,
-- with one mask for every layer. Per rank, for one micro-batch.
CREATE OR REPLACE VIEW model_prices AS
SELECT p.config_hash, p.census_version, p.records_version, p.setting_id, p.mask,
       sum(k.layers * p.attention) AS attention,
       sum(k.layers * p.ffn) AS ffn,
       sum(k.layers * p.norm) AS norm,
       sum(k.layers * p.total) AS total
FROM layer_prices AS p
JOIN kinds AS k USING (config_hash, census_version, kind)
GROUP BY p.config_hash, p.census_version, p.records_version, p.setting_id, p.mask;

-- Whole-model bytes under full recompute: every layer keeps only its input.
CREATE OR REPLACE VIEW model_full_prices AS
SELECT f.config_hash, f.census_version, f.records_version, f.setting_id,
       sum(k.layers * f.kept) AS total
FROM full_prices AS f
JOIN kinds AS k USING (config_hash, census_version, kind)
GROUP BY f.config_hash, f.census_version, f.records_version, f.setting_id;

-- Parameters of a whole spec: embedding, output and final norm, plus every layer's.
CREATE OR REPLACE VIEW spec_params AS
SELECT s.config_hash, s.census_version,
       ((s.spec -> 'params' ->> 'embedding')::BIGINT
         + (s.spec -> 'params' ->> 'output')::BIGINT
         + (s.spec -> 'params' ->> 'final_norm')::BIGINT
         + sum(k.layers * (k.params_attention + k.params_ffn_routed + k.params_ffn_shared
                           + k.params_ffn_router + k.params_ffn_dense + k.params_norm + k.params_other))
       )::BIGINT AS params
FROM specs AS s JOIN kinds AS k USING (config_hash, census_version)
WHERE (s.spec -> 'params') IS NOT NULL
GROUP BY s.config_hash, s.census_version, s.spec;

-- The latest spec of every repo with its popularity: the repo's config censused at the latest
-- run's census version.
CREATE OR REPLACE VIEW latest_specs AS
SELECT r.repo_id, r.downloads, r.likes, r.gated, r.license, r.pipeline_tag, r.sha, r.last_modified,
       c.model_type, p.params,
       s.* EXCLUDE (spec)
FROM repos AS r
JOIN specs AS s ON s.config_hash = r.config_hash
               AND s.census_version = (SELECT census_version FROM latest_run)
JOIN configs AS c ON c.config_hash = r.config_hash
LEFT JOIN spec_params AS p ON p.config_hash = s.config_hash AND p.census_version = s.census_version;

-- Whole-model bytes of every repo at every setting, for every switch set plus full recompute
-- (switch_set 'full', mask NULL), at the latest run's versions. Filter on config_hash, setting_id
-- or mask with constants (or getvariable) to have the scan of the prices skip what is not asked.
CREATE OR REPLACE VIEW repo_prices AS
WITH priced AS (
    SELECT m.config_hash, m.census_version, m.records_version, m.setting_id, m.mask,
           w.name AS switch_set, w.n_recomputed, m.attention, m.ffn, m.norm, m.total
    FROM model_prices AS m JOIN switch_sets AS w USING (mask)
    UNION ALL
    SELECT f.config_hash, f.census_version, f.records_version, f.setting_id, NULL, 'full', NULL,
           NULL, NULL, NULL, f.total
    FROM model_full_prices AS f
)
SELECT r.repo_id, r.downloads, r.likes, r.config_hash,
       s.* EXCLUDE (setting_id), p.setting_id, p.mask, p.switch_set, p.n_recomputed,
       p.attention, p.ffn, p.norm, p.total
FROM repos AS r
JOIN priced AS p ON p.config_hash = r.config_hash
JOIN latest_run AS v ON v.census_version = p.census_version AND v.records_version = p.records_version
JOIN settings AS s ON s.setting_id = p.setting_id;

-- Priced against measured, per kind: the bytes per token one layer keeps with no recompute,
-- priced by the records at the setting the census measured at (its sequence length, one
-- micro-batch, no tensor or context parallelism), next to the bytes autograd saved.
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
       p.total / (s.seq_length * s.micro_batch) / nullif(m.measured_per_token, 0) AS ratio
FROM m
JOIN settings AS s ON s.seq_length = m.seq_length AND s.micro_batch = 1 AND s.tp = 1 AND s.cp = 1
JOIN layer_prices AS p ON p.config_hash = m.config_hash AND p.census_version = m.census_version
                      AND p.kind = m.kind AND p.setting_id = s.setting_id AND p.mask = 0;

-- What changed since the previous run: repos added, removed, or whose config or sha changed.
CREATE OR REPLACE VIEW changes AS
WITH cur AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM latest_run)),
prev AS (SELECT * FROM repo_history WHERE run_id = (SELECT run_id FROM previous_run)),
joined AS (
    SELECT coalesce(cur.repo_id, prev.repo_id) AS repo_id,
           CASE WHEN prev.repo_id IS NULL THEN 'added'
                WHEN cur.repo_id IS NULL THEN 'removed'
                WHEN cur.config_hash IS DISTINCT FROM prev.config_hash THEN 'config'
                WHEN cur.sha IS DISTINCT FROM prev.sha THEN 'sha'
           END AS change,
           prev.sha AS old_sha, cur.sha AS new_sha,
           prev.config_hash AS old_config_hash, cur.config_hash AS new_config_hash,
           prev.downloads AS old_downloads, cur.downloads AS new_downloads
    FROM cur FULL JOIN prev ON cur.repo_id = prev.repo_id
)
SELECT j.*, f.stage AS failed_stage, f.reason AS failed_reason
FROM joined AS j
LEFT JOIN failures AS f ON f.repo_id = j.repo_id AND f.run_id = (SELECT run_id FROM latest_run)
WHERE j.change IS NOT NULL;

-- Failures by reason, per run.
CREATE OR REPLACE VIEW failures_by_reason AS
SELECT f.run_id, r.started, f.stage, f.reason, count(*) AS repos, list(f.repo_id ORDER BY f.repo_id) AS repo_ids
FROM failures AS f JOIN runs AS r USING (run_id)
GROUP BY f.run_id, r.started, f.stage, f.reason;
