-- Macro rank_stages(layouts): whole-rank memory for every model at once, at every parallel
-- layout of the table or view named `layouts`, stage by stage: per layout, repo, setting,
-- switch set (full recompute included) and pipeline stage, what one rank of that stage holds,
-- against the layout's budget, and the recompute the set costs. This is the one home of the
-- planner's rules: rank_layouts takes each layout's fullest stage from it, the view rank_fits
-- reads that at the layout its variables set, and `speccat fit` reads it (through
-- fitting_sets) at every layout of its GPUs, over a catalogue in memory holding the one spec.
-- `layouts` has one row per layout: layout (its number), dp, pp, ep, zero (the ZeRO stage), vpp
-- (virtual stages per rank), etp (NULL: the setting's tp), setting_id (NULL: every setting
-- with one micro-batch in flight; else that setting alone, whose tp and cp are the layout's),
-- recipe (a state_sharding recipe), budget_bytes,
-- accelerator (an accelerators row) and only_fitting: true leaves out the settings of the layout
-- where no switch set can fit its budget, as each stage's floor (its ends, its model states and
-- each kind's fewest bytes under any set) already exceeds it on some stage, and the switch sets
-- fitting_sets can never list (`outclassed`: equal to, or beaten in every kind's bytes and
-- recompute seconds on the layout's accelerator by, a set before it in fitting_sets' order),
-- and the stages that are never the fullest (`overshadowed`: a stage holding neither end whose
-- stage before it holds at least as much of everything, so at least as many bytes under every
-- set and setting). `speccat fit` and the table fits_on ask for that (they read only what fits,
-- at each layout's fullest stage, and most of a large GPU count's layouts fit nowhere);
-- rank_fits_layout does not.
-- A rank of stage i of pp holds its layers' activations and its ends' (the embedding where it
-- holds the stack's first piece, the final norm and the logits where it holds the last), each
-- for the micro-batches in flight of the pipeline schedule it runs (the table schedules: the
-- variable schedule, or the default for the layout's vpp: 1F1B's pp - i, interleaved's times
-- 1 + (pp - 1)/(pp vpp), ...; the head's for the schedule's head_flight where it states one),
-- the logits end under the loss kernel of the variable loss (else the losses table's default,
-- the model's own; loss_prices) and, once, where it holds the last piece, that kernel's working
-- set, or, where larger, what one layer's backward holds beyond its saves: what it remakes
-- before it forms a gradient (the saves of the ops the switch set recomputes, all of them under
-- full recompute; an offloaded layer's saves, brought back) and then its working set
-- (full_prices.backward_peak); the largest of the rank's kinds: the two never meet, the loss's
-- running before any layer's backward, by which the head's tensors of that micro-batch (final
-- norm and logits) are freed, so the layer's moment holds them less;
-- of the activations, those of the rank's first offload_layers layers (the variable, else
-- none; with the variable offload_search true, a row for every count from none to the most
-- layers a stage's rank holds) are in host memory, not on the rank: host_bytes, copied out and
-- back each micro-batch over the accelerator's host link (offload_s); and its weights, gradients and optimizer states
-- (the first stage's rank the embedding's and the extras read before the stack, the last's the final norm's, the
-- head's and the extras read after it; state_sharding: each parameter group divided among the model-parallel ranks, a state the
-- ZeRO stage partitions divided again over the data group). Its layers are the schedule's pieces of the stack (the stack cut into chunks * pp
-- pieces as evenly as it goes, earlier ones a layer more; rank i holding piece i and, where the
-- schedule folds, piece chunks * pp - 1 - i); a rank holding the last piece but not the first
-- holds a copy of a tied word embedding. A schedule the layout cannot run (interleaved needs
-- vpp > 1, the others vpp = 1; its min_pp) leaves the layout without rows. The recompute a
-- switch set costs is the first stage's (the pipeline's critical path; the same on every
-- stage's row), per micro-batch: its layers' ops the set re-runs (switch_ops, op_costs), each
-- estimated on the accelerator as max(FLOPs / peak, bytes / bandwidth); per sequence it is
-- that over dp · the micro-batch, as the dp pipelines run side by side.
-- A layout with pp beyond a model's layers, or ep not dividing both its routed experts and
-- dp·cp, has no rows for it. SET VARIABLE repo_id reads that repo's rows only, and
-- config_hashes (a list) those specs' only (sql/steps/fits_on.sql sets it): asked by spec, the
-- macro names no repo (repo_id NULL, a row per spec, however many repos share it), as every
-- repo of a spec holds the same bytes and a spec shared by thousands of fine-tunes would
-- otherwise be ranked once for each.
-- Grain: one row per (layout, repo_id, setting_id, switch set, offload count, stage), at the
-- latest night's versions; asked by config_hashes, per config_hash in place of repo_id.
-- Columns: rank_fits' (see its view), after `layout`, the layout's number, with `stage` (0
-- first) for fullest_stage and, after it, `fullest`: whether this stage's rank holds the most
-- of its layout's stages under the set (of stages holding as much, the first).
CREATE OR REPLACE MACRO rank_stages(layouts) AS TABLE
WITH layout AS MATERIALIZED (
    SELECT layout, dp, pp, ep, zero, vpp, etp, setting_id, recipe, budget_bytes, accelerator, only_fitting,
           CASE WHEN only_fitting THEN accelerator END AS outclassed_on  -- the accelerator outclassed points are left out on
    FROM query_table(layouts)
),
chosen AS MATERIALIZED (  -- the pipeline schedule a layout runs (schedules), by whether it has virtual stages: the variable
                          -- schedule where it can run it (interleaved with vpp > 1, the others with vpp = 1), else the default
    SELECT v.virtual, s.*
    FROM (VALUES (false), (true)) AS v(virtual)
    JOIN schedules AS s ON s.schedule = coalesce(getvariable('schedule')::VARCHAR,
                                                 (SELECT d.schedule FROM schedules AS d
                                                  WHERE d.default_for = CASE WHEN v.virtual THEN 'virtual' ELSE 'single' END))
    WHERE s.interleaved = v.virtual
),
chosen_loss AS MATERIALIZED (  -- the loss kernel after the head (losses): the variable loss, else the model's own
    SELECT coalesce(getvariable('loss')::VARCHAR, (SELECT loss FROM losses WHERE is_default)) AS loss
),
latest AS MATERIALIZED (  -- the latest specs of the repos asked for
    SELECT s.config_hash, s.census_version, s.transformers_version, s.torch_version, v.records_version, s.num_hidden_layers AS n_layers,
           s.num_experts, s.vocab_size, s.hidden_size, s.tie_word_embeddings,
           (s.spec -> 'params' ->> 'embedding')::DOUBLE AS embedding_params, (s.spec -> 'params' ->> 'final_norm')::DOUBLE AS final_norm_params,
           (s.spec -> 'params' ->> 'output')::DOUBLE AS output_params,
           coalesce((s.spec -> 'params' ->> 'embedding_extra')::DOUBLE, 0) AS embedding_extra_params,  -- 0: a spec from before them
           coalesce((s.spec -> 'params' ->> 'head_extra')::DOUBLE, 0) AS head_extra_params
    FROM specs AS s JOIN latest_run AS v ON s.census_version = v.census_version AND s.transformers_version = v.transformers_version
                                      AND s.torch_version = v.torch_version
    WHERE (getvariable('repo_id') IS NULL OR s.config_hash IN (SELECT config_hash FROM repos WHERE repo_id = getvariable('repo_id')))
      AND (getvariable('config_hashes') IS NULL OR list_contains(getvariable('config_hashes'), s.config_hash))
),
named AS MATERIALIZED (  -- the repos each spec's rows name: all of them, or none (NULL) when asked by config_hashes
    SELECT config_hash, repo_id FROM repos WHERE getvariable('config_hashes') IS NULL
    UNION ALL
    SELECT config_hash, NULL FROM latest WHERE getvariable('config_hashes') IS NOT NULL
),
model AS MATERIALIZED (  -- each spec at each layout that applies to it
    SELECT l.layout, l.pp, l.vpp, c.chunks, c.folded, m.*
    FROM latest AS m, layout AS l JOIN chosen AS c ON c.virtual = (l.vpp > 1)
    WHERE l.pp >= c.min_pp AND l.pp * c.chunks <= m.n_layers AND coalesce(m.num_experts, 1) % l.ep = 0
),
runs AS MATERIALIZED (  -- each run of the stack: its kind and the layers [first, stop) it covers
    SELECT t.config_hash, t.kind, sum(t.count) OVER w - t.count AS first, sum(t.count) OVER w AS stop
    FROM stack AS t JOIN latest AS m USING (config_hash, census_version, transformers_version, torch_version)
    WINDOW w AS (PARTITION BY t.config_hash ORDER BY t.position)
),
pieces AS MATERIALIZED (  -- the pieces of the stack each stage's rank holds: the stack cut into chunks * pp pieces [lo, hi),
                          -- as evenly as it goes (earlier ones a layer more); rank i holds piece i, and piece
                          -- chunks * pp - 1 - i too where the schedule folds
    SELECT layout, config_hash, stage, piece, n_pieces,
           piece * (n_layers // n_pieces) + least(piece, n_layers % n_pieces) AS lo,
           (piece + 1) * (n_layers // n_pieces) + least(piece + 1, n_layers % n_pieces) AS hi
    FROM (SELECT layout, config_hash, n_layers, n_pieces, stage,
                 unnest(CASE WHEN folded THEN list_distinct([stage, n_pieces - 1 - stage]) ELSE [stage] END) AS piece
          FROM (SELECT layout, config_hash, n_layers, pp * chunks AS n_pieces, folded, unnest(range(pp)) AS stage FROM model))
),
stages AS MATERIALIZED (  -- each stage's micro-batches in flight (the schedule's, and the head's where it states them),
                          -- and whether its rank holds the stack's first piece (and the embedding) and its last (the
                          -- final norm and the head)
    SELECT p.layout, p.config_hash, p.stage,
           (c.flight_pp * l.pp + c.flight_stage * p.stage + c.flight_constant)
           * CASE WHEN c.interleaved THEN 1 + (l.pp - 1) / (l.pp * l.vpp) ELSE 1 END AS flight, c.head_flight,
           bool_or(p.piece = 0) AS first_piece, bool_or(p.piece = p.n_pieces - 1) AS last_piece
    FROM pieces AS p JOIN layout AS l USING (layout) JOIN chosen AS c ON c.virtual = (l.vpp > 1)
    GROUP BY ALL
),
offload AS MATERIALIZED (  -- per layout and spec, the layers per rank whose saves go to host memory: the variable
                           -- offload_layers, else none; with the variable offload_search, every count from none to the
                           -- most layers a stage's rank holds (offload a third action beside keeping and recomputing)
    SELECT layout, config_hash,
           unnest(CASE WHEN coalesce(getvariable('offload_search'), false) THEN range(0, max(held)::BIGINT + 1)
                       ELSE [coalesce(getvariable('offload_layers'), 0)::BIGINT] END) AS layers
    FROM (SELECT layout, config_hash, stage, sum(hi - lo) AS held FROM pieces GROUP BY ALL)
    GROUP BY ALL
),
offloading AS MATERIALIZED (  -- of each piece, at each count, the layers [lo, lo + offloaded) whose saves go to host memory:
                              -- the rank's first that many layers, in stack order
    SELECT p.*, o.layers AS offload, least(p.hi - p.lo, greatest(0, o.layers - coalesce(sum(p.hi - p.lo) OVER (
               PARTITION BY p.layout, p.config_hash, o.layers, p.stage ORDER BY p.lo ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))) AS offloaded
    FROM pieces AS p JOIN offload AS o USING (layout, config_hash)
),
stage_kinds AS MATERIALIZED (  -- each stage's layers of each kind at each offload count, and of those the offloaded
    SELECT s.layout, s.config_hash, s.offload, s.stage, r.kind, sum(greatest(0, least(s.hi, r.stop) - greatest(s.lo, r.first))) AS layers,
           sum(greatest(0, least(s.lo + s.offloaded, r.stop) - greatest(s.lo, r.first))) AS offloaded
    FROM offloading AS s JOIN runs AS r USING (config_hash)
    GROUP BY ALL HAVING sum(greatest(0, least(s.hi, r.stop) - greatest(s.lo, r.first))) > 0
),
kinds_held AS MATERIALIZED (  -- each stage's layers of each kind, whatever is offloaded
    SELECT * EXCLUDE (offload, offloaded) FROM stage_kinds QUALIFY offload = min(offload) OVER (PARTITION BY layout, config_hash)
),
kind_params AS MATERIALIZED (
    SELECT config_hash, census_version, transformers_version, torch_version, kind, replace(column_name, 'params_', '') AS "group", params
    FROM (UNPIVOT kinds ON params_attention, params_ffn_routed, params_ffn_shared, params_ffn_router,
                            params_ffn_dense, params_norm, params_other INTO NAME column_name VALUE params)
),
stage_params AS MATERIALIZED (  -- parameters per group on each stage, before model-parallel sharding
    SELECT k.layout, k.config_hash, k.stage, p."group", sum(k.layers * p.params) AS params
    FROM kinds_held AS k JOIN latest AS m USING (config_hash)
    JOIN kind_params AS p ON p.config_hash = k.config_hash AND p.census_version = m.census_version AND p.transformers_version = m.transformers_version
                         AND p.torch_version = m.torch_version AND p.kind = k.kind
    GROUP BY ALL
    UNION ALL
    SELECT m.layout, m.config_hash, s.stage, 'embedding', m.embedding_params
    FROM model AS m JOIN stages AS s USING (layout, config_hash) WHERE s.first_piece
    UNION ALL
    SELECT m.layout, m.config_hash, s.stage, 'embedding_extra', m.embedding_extra_params
    FROM model AS m JOIN stages AS s USING (layout, config_hash) WHERE s.first_piece
    UNION ALL
    SELECT m.layout, m.config_hash, s.stage, 'final_norm', m.final_norm_params
    FROM model AS m JOIN stages AS s USING (layout, config_hash) WHERE s.last_piece
    UNION ALL
    SELECT m.layout, m.config_hash, s.stage, 'head_extra', m.head_extra_params
    FROM model AS m JOIN stages AS s USING (layout, config_hash) WHERE s.last_piece
    UNION ALL
    SELECT m.layout, m.config_hash, s.stage, 'output',
           CASE WHEN NOT s.first_piece AND coalesce(m.output_params, 0) = 0 AND m.tie_word_embeddings
                THEN m.vocab_size::DOUBLE * m.hidden_size  -- a copy of the tied word embedding where the rank lacks it
                ELSE m.output_params END
    FROM model AS m JOIN stages AS s USING (layout, config_hash) WHERE s.last_piece
),
overshadowed AS MATERIALIZED (  -- stages never the fullest of their layout, at each offload count: a stage i holding neither
                               -- end (no embedding, final norm, logits or loss) whose stage i - 1 holds, of every kind, at
                               -- least as many layers (so as many parameters of every group: i holds no end's), as many
                               -- layers' activations on the rank (layers kept times micro-batches in flight), and every
                               -- kind it keeps or offloads (its backward's largest): i - 1 holds at least as many bytes
                               -- under every set and setting (its ends' bytes cover any head its backward moment leaves
                               -- out), and of equals the first is the fullest
    SELECT s.layout, s.config_hash, o.layers AS offload, s.stage
    FROM stages AS s JOIN offload AS o USING (layout, config_hash)
    JOIN stages AS b ON b.layout = s.layout AND b.config_hash = s.config_hash AND b.stage = s.stage - 1
    WHERE NOT s.first_piece AND NOT s.last_piece
      AND (NOT b.last_piece OR coalesce(b.head_flight, b.flight) >= 1)  -- its ends then hold at least one head
    EXCEPT  -- a kind stage i holds more of than i - 1, or keeps or offloads where i - 1 does not
    SELECT k.layout, k.config_hash, k.offload, k.stage
    FROM stage_kinds AS k JOIN stages AS s USING (layout, config_hash, stage)
    JOIN stages AS b ON b.layout = k.layout AND b.config_hash = k.config_hash AND b.stage = k.stage - 1
    LEFT JOIN stage_kinds AS e ON e.layout = k.layout AND e.config_hash = k.config_hash AND e.offload = k.offload
                              AND e.stage = b.stage AND e.kind = k.kind
    WHERE k.layers > coalesce(e.layers, 0)
       OR (k.layers - k.offloaded) * s.flight > coalesce(e.layers - e.offloaded, 0) * b.flight
       OR (k.layers > k.offloaded AND coalesce(e.layers - e.offloaded, 0) = 0)
       OR (k.offloaded > 0 AND coalesce(e.offloaded, 0) = 0)
),
priced AS MATERIALIZED (  -- the settings each spec is priced at, per layout (micro-batches in flight: the stages')
    SELECT DISTINCT m.layout, f.config_hash, f.setting_id, g.tp, g.cp
    FROM full_prices AS f JOIN model AS m USING (config_hash, census_version, transformers_version, torch_version, records_version)
    JOIN settings AS g ON g.setting_id = f.setting_id
    JOIN layout AS l ON l.layout = m.layout
    WHERE g.in_flight = 1 AND (l.dp * g.cp) % l.ep = 0 AND g.setting_id = coalesce(l.setting_id, g.setting_id)
),
held AS MATERIALIZED (  -- bytes one rank holds per parameter of a group, per state, at each layout and (tp, cp) priced
    SELECT l.layout, x."group", x.state, g.tp, g.cp,
           x.bytes_per_param
           / (pow(g.tp, x.model_t) * pow(g.cp, x.model_cp) * pow(l.dp, x.model_dp) * pow(l.ep, x.model_ep)
              * pow(coalesce(l.etp, g.tp), x.model_etp))
           / CASE WHEN l.zero >= x.sharded_from  -- a state the ZeRO stage partitions over the data group
                  THEN pow(g.tp, x.data_t) * pow(g.cp, x.data_cp) * pow(l.dp, x.data_dp) * pow(l.ep, x.data_ep)
                       * pow(coalesce(l.etp, g.tp), x.data_etp)
                  ELSE 1 END AS held
    FROM state_sharding AS x JOIN layout AS l ON x.recipe = l.recipe
    JOIN (SELECT DISTINCT layout, tp, cp FROM priced) AS g ON g.layout = l.layout
),
stage_states AS MATERIALIZED (  -- each stage's weights, gradients and optimizer states at each setting: summed once per
                               -- (tp, cp), which they depend on, and read by every setting of that pair
    SELECT p.layout, p.config_hash, p.setting_id, t.stage, t.weight, t.grad, t.optimizer
    FROM priced AS p
    JOIN (SELECT g.layout, g.config_hash, g.tp, g.cp, p2.stage,
                 sum(p2.params * r.held) FILTER (WHERE r.state = 'weight') AS weight,
                 sum(p2.params * r.held) FILTER (WHERE r.state = 'grad') AS grad,
                 sum(p2.params * r.held) FILTER (WHERE r.state = 'optimizer') AS optimizer
          FROM (SELECT DISTINCT layout, config_hash, tp, cp FROM priced) AS g
          JOIN stage_params AS p2 ON p2.layout = g.layout AND p2.config_hash = g.config_hash
          JOIN held AS r ON r.layout = g.layout AND r."group" = p2."group" AND r.tp = g.tp AND r.cp = g.cp
          WHERE (p2.layout, p2.config_hash, p2.stage) NOT IN  -- none read: overshadowed at every offload count of a layout
                (SELECT (v.layout, v.config_hash, v.stage)     -- asking only_fitting
                 FROM overshadowed AS v JOIN layout AS l USING (layout)
                 JOIN (SELECT layout, config_hash, count(*) AS counts FROM offload GROUP BY ALL) AS c USING (layout, config_hash)
                 WHERE l.only_fitting GROUP BY v.layout, v.config_hash, v.stage, c.counts HAVING count(*) = c.counts)
          GROUP BY ALL) AS t
      ON t.layout = p.layout AND t.config_hash = p.config_hash AND t.tp = p.tp AND t.cp = p.cp
),
points AS MATERIALIZED (  -- one layer of each kind at each setting and point: the masks, then full recompute (-1); what
                         -- it keeps (kept), and what it keeps with nothing recomputed (kept_none): its backward remakes
                         -- the saves of the ops it recomputes (remade: kept_none less kept; under full recompute, all of
                         -- kept_none) before it forms a gradient, and then holds its working set on top (working:
                         -- full_prices.backward_peak, 0 where unpriced); at the settings priced only
    SELECT * EXCLUDE (backward_peak), CASE WHEN mask = -1 THEN kept_none ELSE kept_none - kept END AS remade
    FROM (SELECT *, max(kept) FILTER (WHERE mask = 0) OVER (PARTITION BY config_hash, kind, setting_id) AS kept_none,
                 coalesce(max(backward_peak) OVER (PARTITION BY config_hash, kind, setting_id), 0) AS working
          FROM (SELECT config_hash, kind, setting_id, mask, total AS kept, NULL::DOUBLE AS backward_peak
                FROM layer_prices JOIN latest USING (config_hash, census_version, transformers_version, torch_version, records_version)
                UNION ALL
                SELECT config_hash, kind, setting_id, -1, kept, backward_peak
                FROM full_prices JOIN latest USING (config_hash, census_version, transformers_version, torch_version, records_version))
          WHERE (config_hash, setting_id) IN (SELECT (config_hash, setting_id) FROM priced))
),
op_seconds AS NOT MATERIALIZED (  -- one layer's op at each setting: its recompute cost, and its time on each accelerator asked for
    SELECT a.accelerator, o.config_hash, o.kind, o.setting_id, o.op, o.recompute_flops, o.recompute_bytes,
           greatest(o.recompute_flops / a.peak_flops_per_s, o.recompute_bytes / a.bandwidth_bytes_per_s) AS seconds
    FROM op_costs AS o JOIN latest USING (config_hash, census_version, transformers_version, torch_version, records_version)
    JOIN accelerators AS a ON a.accelerator IN (SELECT accelerator FROM layout)
    WHERE (o.config_hash, o.setting_id) IN (SELECT (config_hash, setting_id) FROM priced)
),
point_costs AS (  -- one layer of each kind at each setting priced: what each point re-runs and its time
    SELECT s.accelerator, s.config_hash, s.kind, s.setting_id, w.mask, sum(s.recompute_flops) AS flops, sum(s.recompute_bytes) AS moved,
           sum(s.seconds) AS seconds
    FROM op_seconds AS s JOIN switch_ops AS w USING (op)
    GROUP BY ALL
),
fitting_pairs AS MATERIALIZED (  -- the (spec, setting) pairs a layout asking only_fitting reads, on its accelerator
    SELECT DISTINCT l.accelerator, q.config_hash, q.setting_id FROM priced AS q JOIN layout AS l USING (layout) WHERE l.only_fitting
),
signatures AS MATERIALIZED (  -- per pair: each point's bytes kept and recompute seconds in each kind, in kind order, and
                              -- its place in fitting_sets' order
    SELECT f.accelerator, p.config_hash, p.setting_id, p.mask, CASE WHEN p.mask = -1 THEN 1 ELSE 0 END AS full_last,
           list(p.kept ORDER BY p.kind) AS kept, list(coalesce(c.seconds, 0) ORDER BY p.kind) AS seconds
    FROM fitting_pairs AS f JOIN points AS p USING (config_hash, setting_id)
    LEFT JOIN (SELECT s.accelerator, s.config_hash, s.kind, s.setting_id, w.mask, sum(s.seconds) AS seconds
               FROM op_seconds AS s JOIN switch_ops AS w USING (op)
               WHERE (s.accelerator, s.config_hash, s.setting_id) IN (SELECT (accelerator, config_hash, setting_id) FROM fitting_pairs)
               GROUP BY ALL) AS c
      ON c.accelerator = f.accelerator AND c.config_hash = p.config_hash AND c.kind = p.kind AND c.setting_id = p.setting_id AND c.mask = p.mask
    GROUP BY ALL
),
classes AS MATERIALIZED (  -- points equal in every kind's bytes and seconds: the first in fitting_sets' order stands for them
    SELECT accelerator, config_hash, setting_id, kept, seconds, arg_min({'full_last': full_last, 'mask': mask}, (full_last, mask)) AS first,
           list(mask) AS members
    FROM signatures GROUP BY ALL
),
outclassed AS MATERIALIZED (  -- points fitting_sets never lists, at any layout and budget, as another is listed before them
                              -- (keeping no more bytes in any kind, costing no more seconds in any, and first in its order):
                              -- left out of a layout asking only_fitting, whose rows are read for what fits. A point keeping
                              -- less of a kind remakes as much more of it, which each layer of that kind a rank holds repays:
                              -- its rank's total is no larger
    SELECT accelerator, config_hash, setting_id, unnest(list_filter(members, m -> m <> first.mask)) AS mask FROM classes
    UNION ALL
    SELECT a.accelerator, a.config_hash, a.setting_id, a.first.mask
    FROM classes AS a JOIN classes AS b USING (accelerator, config_hash, setting_id)
    WHERE b.first < a.first
      AND list_bool_and(list_transform(list_zip(b.kept, a.kept), x -> x[1] <= x[2]))
      AND list_bool_and(list_transform(list_zip(b.seconds, a.seconds), x -> x[1] <= x[2]))
),
listed AS MATERIALIZED (  -- per accelerator of the layouts asking only_fitting, the points of their pairs not outclassed
    SELECT f.accelerator AS outclassed_on, p.*
    FROM fitting_pairs AS f JOIN points AS p USING (config_hash, setting_id)
    ANTI JOIN outclassed AS o ON o.accelerator = f.accelerator AND o.config_hash = p.config_hash AND o.setting_id = p.setting_id AND o.mask = p.mask
),
read_points AS NOT MATERIALIZED (  -- the points a layout reads: every one (outclassed_on NULL), or those listed for its accelerator
    SELECT NULL::VARCHAR AS outclassed_on, * FROM points
    UNION ALL
    SELECT * FROM listed
),
priced_ends AS MATERIALIZED (  -- the ends' bytes per micro-batch at each (layout, spec, setting) priced, the logits under the
                               -- loss kernel asked for (the variable loss, else the model's own), with its working set
    SELECT p.layout, p.config_hash, p.setting_id, e.embedding, e.final_norm, x.kept_bytes AS logits, x.working_bytes AS loss_working
    FROM priced AS p JOIN latest AS m USING (config_hash)
    JOIN end_prices AS e ON e.config_hash = m.config_hash AND e.census_version = m.census_version AND e.transformers_version = m.transformers_version
                        AND e.torch_version = m.torch_version AND e.records_version = m.records_version AND e.setting_id = p.setting_id
    JOIN loss_prices AS x ON x.config_hash = m.config_hash AND x.census_version = m.census_version AND x.transformers_version = m.transformers_version
                         AND x.torch_version = m.torch_version AND x.records_version = m.records_version AND x.setting_id = p.setting_id
                         AND x.loss = (SELECT loss FROM chosen_loss)
),
stage_held AS MATERIALIZED (  -- what each stage's rank holds beside its layers' activations: its ends', the loss's working set
                              -- where it holds the head (one micro-batch's at a time), and its model states
    SELECT t.layout, t.config_hash, t.setting_id, t.stage, s.flight,
           CASE WHEN s.first_piece THEN e.embedding * s.flight ELSE 0 END
           + CASE WHEN s.last_piece THEN (e.final_norm + e.logits) * coalesce(s.head_flight, s.flight) ELSE 0 END AS ends,
           CASE WHEN s.last_piece THEN e.loss_working ELSE 0 END AS transient,
           CASE WHEN s.last_piece THEN e.final_norm + e.logits ELSE 0 END AS head,
           t.weight, t.grad, t.optimizer
    FROM stage_states AS t
    JOIN stages AS s USING (layout, config_hash, stage)
    JOIN priced_ends AS e USING (layout, config_hash, setting_id)
),
possible AS MATERIALIZED (  -- the (layout, spec, setting) priced set by set: all, but of a layout asking only_fitting those under
                            -- which some set could fit, no stage's floor over its budget (each kind's fewest bytes under any set)
    SELECT h.layout, h.config_hash, h.setting_id
    FROM stage_held AS h JOIN layout AS l ON l.layout = h.layout
    LEFT JOIN (SELECT layout, config_hash, setting_id, stage, min(activations) AS activations  -- at the count offloading most
               FROM (SELECT k.layout, k.config_hash, q.setting_id, k.stage, k.offload, sum((k.layers - k.offloaded) * f.kept) AS activations
                     FROM stage_kinds AS k JOIN priced AS q USING (layout, config_hash)
                     JOIN (SELECT config_hash, kind, setting_id, min(kept) AS kept FROM points GROUP BY ALL) AS f
                       ON f.config_hash = k.config_hash AND f.kind = k.kind AND f.setting_id = q.setting_id
                     WHERE (k.layout, k.config_hash, k.offload, k.stage) NOT IN  -- an overshadowed stage's floor is no higher
                           (SELECT (layout, config_hash, offload, stage) FROM overshadowed)
                     GROUP BY ALL)
               GROUP BY ALL) AS a
      ON a.layout = h.layout AND a.config_hash = h.config_hash AND a.setting_id = h.setting_id AND a.stage = h.stage
    GROUP BY h.layout, h.config_hash, h.setting_id
    HAVING NOT bool_or(l.only_fitting)
           OR max(coalesce(a.activations, 0) * h.flight + h.ends + h.transient + h.weight + h.grad + h.optimizer) <= min(l.budget_bytes)
),
stage_totals AS (  -- each stage's rank under each set: what it holds by part, and in all (total); of the two moments that
                   -- never meet, the loss's (its working set) and one layer's backward (beyond its saves: what it remakes, an
                   -- offloaded layer's saves whole, and its working set; the largest of the stage's kinds), whichever holds
                   -- more: by a layer's backward its micro-batch's head tensors (final norm and logits) have been freed
    SELECT a.layout, a.config_hash, a.setting_id, a.mask, a.offload, a.stage, h.flight, a.activations * h.flight AS activations, h.ends,
           h.transient, a.remade, a.backward, h.weight, h.grad, h.optimizer, a.offloaded * h.flight AS host, a.offloaded AS offloaded,
           a.activations * h.flight + h.ends + greatest(h.transient, a.backward - h.head) + h.weight + h.grad + h.optimizer AS total
    FROM (SELECT k.layout, k.config_hash, q.setting_id, p.mask, k.offload, k.stage, sum((k.layers - k.offloaded) * p.kept) AS activations,
                 sum(k.offloaded * p.kept) AS offloaded,
                 greatest(max(CASE WHEN k.layers > k.offloaded THEN p.remade ELSE 0 END),
                          max(CASE WHEN k.offloaded > 0 THEN p.kept_none ELSE 0 END)) AS remade,
                 greatest(max(CASE WHEN k.layers > k.offloaded THEN p.remade + p.working ELSE 0 END),
                          max(CASE WHEN k.offloaded > 0 THEN p.kept_none + p.working ELSE 0 END)) AS backward
          FROM stage_kinds AS k JOIN possible AS q USING (layout, config_hash)
          JOIN layout AS l ON l.layout = k.layout
          JOIN read_points AS p ON p.outclassed_on IS NOT DISTINCT FROM l.outclassed_on AND p.config_hash = k.config_hash
                               AND p.kind = k.kind AND p.setting_id = q.setting_id
          WHERE NOT (l.only_fitting AND (k.layout, k.config_hash, k.offload, k.stage) IN
                                        (SELECT (layout, config_hash, offload, stage) FROM overshadowed))
          GROUP BY ALL) AS a
    JOIN stage_held AS h USING (layout, config_hash, setting_id, stage)
),
ranked AS (  -- and whether the stage is the fullest: per layout, spec, setting, set and offload count, the stage whose rank
             -- holds the most (of equals, the first); a column of the rows, so that a reader asking for the fullest stages
             -- only (rank_layouts) has them filtered before the rows are named and joined
    SELECT x.*, u.stage IS NOT NULL AS fullest
    FROM stage_totals AS x
    LEFT JOIN (SELECT layout, config_hash, setting_id, mask, offload, arg_max(stage, (total, -stage)) AS stage
               FROM stage_totals GROUP BY ALL) AS u
      ON u.layout = x.layout AND u.config_hash = x.config_hash AND u.setting_id = x.setting_id AND u.mask = x.mask
     AND u.offload = x.offload AND u.stage = x.stage
),
step_forwards AS (  -- the layer's step in forwards (costs.yaml step_factor): switch_costs' ratio at full recompute
    SELECT c.config_hash, c.kind, c.setting_id, c.step_flops / nullif(c.recompute_flops, 0) AS forwards
    FROM switch_costs AS c JOIN latest USING (config_hash, census_version, transformers_version, torch_version, records_version)
    WHERE c.mask = -1
),
first_costs AS (  -- the first stage's layers, per micro-batch: each point's recompute and the step's time
    SELECT k.layout, k.config_hash, p.setting_id, p.mask, sum(k.layers * coalesce(c.flops, 0)) AS flops,
           sum(k.layers * coalesce(c.moved, 0)) AS moved, round(sum(k.layers * coalesce(c.seconds, 0)), 15) AS seconds,  -- to the femtosecond: sums of the same terms in another order rank alike
           sum(k.layers * f.seconds * s.forwards) AS step_seconds
    FROM kinds_held AS k JOIN layout AS l ON l.layout = k.layout
    JOIN possible AS q ON q.layout = k.layout AND q.config_hash = k.config_hash
    JOIN read_points AS p ON p.outclassed_on IS NOT DISTINCT FROM l.outclassed_on AND p.config_hash = k.config_hash
                         AND p.kind = k.kind AND p.setting_id = q.setting_id
    LEFT JOIN point_costs AS c ON c.accelerator = l.accelerator AND c.config_hash = p.config_hash AND c.kind = p.kind
                              AND c.setting_id = p.setting_id AND c.mask = p.mask
    JOIN point_costs AS f ON f.accelerator = l.accelerator AND f.config_hash = p.config_hash AND f.kind = p.kind
                         AND f.setting_id = p.setting_id AND f.mask = -1
    JOIN step_forwards AS s ON s.config_hash = p.config_hash AND s.kind = p.kind AND s.setting_id = p.setting_id
    WHERE k.stage = 0
    GROUP BY ALL
)
SELECT x.layout, r.repo_id, x.config_hash, x.setting_id, g.stack, g.seq_length AS seq_length_tokens,
       g.micro_batch AS micro_batch_count, g.tp AS tp_ranks, g.cp AS cp_ranks, l.dp AS dp_ranks, l.pp AS pp_ranks,
       l.ep AS ep_ranks, l.zero AS zero_stage, l.vpp AS vpp_count, sch.schedule, (SELECT loss FROM chosen_loss) AS loss, l.recipe,
       l.dp * g.tp * l.pp * g.cp AS gpus_count,
       x.mask, coalesce(w.name, 'full') AS switch_set, x.stage, x.fullest, x.flight AS in_flight_count,
       x.activations AS activation_bytes, x.ends AS ends_bytes, x.transient AS loss_working_bytes, x.remade AS remade_bytes,
       x.backward AS backward_bytes,
       x.weight AS weight_bytes,
       x.grad AS grad_bytes, x.optimizer AS optimizer_bytes, x.offload AS offload_layers, x.host AS host_bytes,
       2 * x.offloaded / a.host_link_bytes_per_s AS offload_s,
       x.total AS total_bytes, l.budget_bytes, x.total <= l.budget_bytes AS fits, l.budget_bytes - x.total AS headroom_bytes,
       l.accelerator, c.flops AS recompute_flops, c.moved AS recompute_bytes, c.seconds AS recompute_s,
       100 * c.seconds / nullif(c.step_seconds, 0) AS overhead_pct,
       c.seconds / (l.dp * g.micro_batch) AS recompute_s_per_seq
FROM ranked AS x
JOIN layout AS l ON l.layout = x.layout
LEFT JOIN accelerators AS a ON a.accelerator = l.accelerator
JOIN chosen AS sch ON sch.virtual = (l.vpp > 1)
JOIN named AS r ON r.config_hash = x.config_hash
JOIN settings AS g ON g.setting_id = x.setting_id
LEFT JOIN switch_sets AS w ON w.mask = x.mask
LEFT JOIN first_costs AS c ON c.layout = x.layout AND c.config_hash = x.config_hash AND c.setting_id = x.setting_id AND c.mask = x.mask;
