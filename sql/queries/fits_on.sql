-- Every model that fits on a number of GPUs of a memory size at a sequence length, best first:
-- the view repo_fits_on's rows that fit, ordered by the least recompute overhead (the best
-- layout's switch set re-runs the least of the step), then the most bytes to spare, then the
-- most downloaded. Each row is what `speccat fit REPO --gpus N --gpu-mem SIZE --seq S` lists
-- first; beyond_positions flags a sequence longer than the model's positions.
-- Parameters: gpu_mem (required: a size of catalogue/records/fits_on.yaml with its unit, 80GiB),
--   gpus (required), seq (required: a sequence length of the grid), stack [the grid's default].
SET VARIABLE _gpu_mem_gib = CASE
    WHEN getvariable('gpu_mem') IS NULL THEN error('gpu_mem is required: a memory size with its unit, such as 80GiB')
    WHEN NOT regexp_full_match(trim(getvariable('gpu_mem')::VARCHAR), '[0-9]+(\.[0-9]+)? *GiB')
        THEN error('gpu_mem ' || getvariable('gpu_mem')::VARCHAR || ': give GiB, such as 80GiB (the sizes the table holds: '
                   || (SELECT string_agg(gpu_mem_gib || 'GiB', ', ' ORDER BY gpu_mem_gib) FROM fits_on_sizes) || ')')
    ELSE regexp_extract(trim(getvariable('gpu_mem')::VARCHAR), '^[0-9.]+')::DOUBLE END;
SET VARIABLE _gpu_mem_gib = CASE
    WHEN getvariable('_gpu_mem_gib') IN (SELECT gpu_mem_gib FROM fits_on_sizes) THEN getvariable('_gpu_mem_gib')::INTEGER
    ELSE error('gpu_mem ' || getvariable('gpu_mem')::VARCHAR || ' is not a size the table holds: '
               || coalesce((SELECT string_agg(gpu_mem_gib || 'GiB', ', ' ORDER BY gpu_mem_gib) FROM fits_on_sizes), 'none')) END;
SET VARIABLE _gpus = CASE
    WHEN getvariable('gpus') IN (SELECT DISTINCT gpus FROM fits_on_layouts) THEN getvariable('gpus')::INTEGER
    ELSE error('gpus ' || coalesce(getvariable('gpus')::VARCHAR, '(not set)') || ' is not a count the table holds: '
               || coalesce((SELECT string_agg(n::VARCHAR, ', ' ORDER BY n) FROM (SELECT DISTINCT gpus AS n FROM fits_on_layouts)), 'none')) END;
SET VARIABLE _seq = CASE
    WHEN getvariable('seq') IN (SELECT DISTINCT g.seq_length FROM fits_on_layouts JOIN settings AS g USING (setting_id))
        THEN getvariable('seq')::INTEGER
    ELSE error('seq ' || coalesce(getvariable('seq')::VARCHAR, '(not set)') || ' is not a sequence length the table holds: '
               || coalesce((SELECT string_agg(n::VARCHAR, ', ' ORDER BY n) FROM (SELECT DISTINCT g.seq_length AS n FROM fits_on_layouts JOIN settings AS g USING (setting_id))), 'none')) END;
SET VARIABLE _stack = coalesce(getvariable('stack')::VARCHAR, (SELECT stack FROM setting_defaults));

SELECT repo_id, downloads, stack, seq_length, gpus, gpu_mem_gib, beyond_positions, dp, tp, pp, cp, ep, zero, switch_set,
       total_bytes, headroom_bytes, round(overhead_pct, 2) AS overhead_pct, recompute_s_per_seq, recipe, accelerator
FROM repo_fits_on
WHERE gpu_mem_gib = getvariable('_gpu_mem_gib') AND gpus = getvariable('_gpus') AND seq_length = getvariable('_seq')
  AND stack = getvariable('_stack') AND fits
ORDER BY overhead_pct, headroom_bytes DESC, downloads DESC NULLS LAST, repo_id;
