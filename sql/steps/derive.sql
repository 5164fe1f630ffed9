-- Derive the night's spec tables from the staged JSON documents. Runs with `USE incoming`,
-- where the store has created this file's two inputs from Arrow:
--   raw_configs(config_hash, config VARCHAR)          the config JSON of each new config
--   raw_specs(config_hash, census_version, transformers_version, torch_version, spec VARCHAR)
--       each new ModelSpec as JSON, with the versions that measured it (its key)
-- The column names of a spec are the ModelSpec field names (README.md, ModelSpec); a field
-- the spec leaves absent becomes NULL, never zero.

INSERT INTO configs
SELECT config_hash, config::JSON ->> 'model_type', config::JSON
FROM raw_configs;

INSERT INTO specs
SELECT config_hash, census_version, transformers_version, torch_version,
       s ->> 'name', s ->> 'arch',
       (s ->> 'hidden_size')::INTEGER, (s ->> 'num_hidden_layers')::INTEGER,
       (s ->> 'num_attention_heads')::INTEGER, (s ->> 'num_key_value_heads')::INTEGER,
       (s ->> 'head_dim')::INTEGER, (s ->> 'intermediate_size')::INTEGER,
       (s ->> 'vocab_size')::INTEGER, (s ->> 'max_position_embeddings')::INTEGER,
       (s ->> 'num_experts')::INTEGER, (s ->> 'num_experts_per_tok')::INTEGER,
       (s ->> 'moe_intermediate_size')::INTEGER, (s ->> 'kv_lora_rank')::INTEGER,
       (s ->> 'q_lora_rank')::INTEGER, (s ->> 'sliding_window')::INTEGER,
       (s ->> 'tie_word_embeddings')::BOOLEAN,
       s, s ->> 'built_as'
FROM (SELECT config_hash, census_version, transformers_version, torch_version, spec::JSON AS s FROM raw_specs);

INSERT INTO stack
SELECT config_hash, census_version, transformers_version, torch_version, g.key::SMALLINT, g.value ->> 'kind', (g.value ->> 'count')::INTEGER
FROM raw_specs, json_each(spec::JSON -> 'layers') AS g;

INSERT INTO kinds
SELECT r.config_hash, r.census_version, r.transformers_version, r.torch_version, o.key,
       s -> 'flavours' -> o.key ->> 'attention',
       s -> 'flavours' -> o.key ->> 'ffn',
       (SELECT sum(count) FROM stack t
         WHERE t.config_hash = r.config_hash AND t.census_version = r.census_version
           AND t.transformers_version = r.transformers_version AND t.torch_version = r.torch_version AND t.kind = o.key),
       (o.value ->> 'attMM')::SMALLINT, (o.value ->> 'attBMM')::SMALLINT, (o.value ->> 'ffMM')::SMALLINT,
       (o.value ->> 'softmax')::SMALLINT, (o.value ->> 'dropout')::SMALLINT, (o.value ->> 'normOp')::SMALLINT,
       (o.value ->> 'gather')::SMALLINT, (o.value ->> 'headCast')::SMALLINT, (o.value ->> 'ffAct')::SMALLINT,
       (o.value ->> 'linrec')::SMALLINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'attention')::BIGINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'ffn_routed')::BIGINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'ffn_shared')::BIGINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'ffn_router')::BIGINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'ffn_dense')::BIGINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'norm')::BIGINT,
       (s -> 'params' -> 'kinds' -> o.key ->> 'other')::BIGINT
FROM (SELECT config_hash, census_version, transformers_version, torch_version, spec::JSON AS s FROM raw_specs) AS r,
     json_each(s -> 'ops') AS o;

INSERT INTO measured
SELECT r.config_hash, r.census_version, r.transformers_version, r.torch_version, m.key, b.key, b.value::DOUBLE,
       (m.value ->> 'seq_length')::INTEGER, m.value ->> 'attention_impl', m.value ->> 'experts_impl',
       'census', 1, 1, false, [], (m.value ->> 'forward_flops')::DOUBLE, (m.value ->> 'backward_peak')::DOUBLE
FROM raw_specs AS r,
     json_each(r.spec::JSON -> 'measured') AS m,
     json_each(m.value -> 'bytes_per_token') AS b;

-- The points across settings take the implementations of the census's own measurement; the
-- census counts FLOPs and the backward peak at its own point only.
INSERT INTO measured
SELECT r.config_hash, r.census_version, r.transformers_version, r.torch_version, k.key, b.key, b.value::DOUBLE,
       (p.value ->> 'seq_length')::INTEGER,
       r.spec::JSON -> 'measured' -> k.key ->> 'attention_impl', r.spec::JSON -> 'measured' -> k.key ->> 'experts_impl',
       p.value ->> 'point', (p.value ->> 'tp')::INTEGER, (p.value ->> 'cp')::INTEGER,
       (p.value ->> 'sequence_parallel')::BOOLEAN, (p.value -> 'recompute')::VARCHAR[], NULL, NULL
FROM raw_specs AS r,
     json_each(r.spec::JSON -> 'measured_at') AS p,
     json_each(p.value -> 'bytes_per_token') AS k,
     json_each(k.value) AS b;
