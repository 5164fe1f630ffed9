-- View repo_fits_on: what fits, for every model at once (the table fits_on, per repo): for each
-- repo at the latest night's versions, stack, sequence length of the grid, GPU count and memory
-- size of catalogue/records/fits_on.yaml, the (layout, switch set) `speccat fit REPO --gpus N
-- --gpu-mem SIZEGiB --seq S --stack STACK` lists first, under the recipe and accelerator of
-- fits_on_sizes, or fits = false where nothing fits. A repo whose spec the night refused to
-- price has no rows. Filter on seq_length, gpus and gpu_mem_gib with constants for a fast scan;
-- `speccat query fits_on` does.
-- Grain: one row per (repo_id, stack, seq_length, gpus, gpu_mem_gib).
-- Columns:
--   repo_id                id       the Hub repo
--   downloads              count    the Hub's download count, as last listed
--   config_hash            id       the repo's config
--   stack                  code     the training stack priced: transformers or megatron
--   seq_length             tokens   the sequence length
--   gpus                   count    the GPUs: dp · tp · pp · cp
--   gpu_mem_gib            count    the memory a rank may hold, in GiB
--   fits                   flag     some layout and switch set fit
--   beyond_positions       flag     the sequence is longer than the config's max_position_embeddings (RoPE scaling may extend it)
--   dp                     count    data-parallel ranks of the best layout
--   tp                     count    tensor-parallel ranks
--   pp                     count    pipeline stages
--   cp                     count    context-parallel ranks
--   ep                     count    expert-parallel ranks
--   zero                   code     the ZeRO stage
--   switch_set             code     the switch set: none, all, switches joined by commas, or full
--   mask                   id       the switch set (switch_sets); -1 for full recompute
--   fullest_stage          id       the pipeline stage whose rank holds the most (0 first)
--   activation_bytes       bytes    that rank's layers' activations, all micro-batches in flight
--   ends_bytes             bytes    its ends' (embedding; final norm and logits)
--   loss_working_bytes     bytes    the model's own loss's working set, where the rank holds the head
--   remade_bytes           bytes    the saves one layer's backward remakes under the set (all under full recompute), the stage's largest
--   backward_bytes         bytes    what one layer's backward holds beyond its saves: what it remakes and its working set, the stage's largest
--   weight_bytes           bytes    its weights
--   grad_bytes             bytes    its gradients
--   optimizer_bytes        bytes    its optimizer states
--   total_bytes            bytes    what the rank holds at its peak: the larger of the two working sets, not their sum
--   headroom_bytes         bytes    gpu_mem_gib GiB - total_bytes
--   recompute_s_per_seq    seconds  estimated recompute time per sequence (the first stage's, over dp)
--   overhead_pct           percent  the recompute time over the same layers' forward + backward time, in per cent
--   recipe                 code     the training recipe (state_sharding)
--   accelerator            code     the accelerator recompute time is estimated on
CREATE OR REPLACE VIEW repo_fits_on AS
SELECT r.repo_id, r.downloads, f.config_hash, f.stack, f.seq_length, f.gpus, f.gpu_mem_gib, f.fits,
       f.seq_length > s.max_position_embeddings AS beyond_positions,
       f.dp, f.tp, f.pp, f.cp, f.ep, f.zero, f.switch_set, f.mask, f.fullest_stage, f.activation_bytes, f.ends_bytes,
       f.loss_working_bytes, f.remade_bytes, f.backward_bytes, f.weight_bytes, f.grad_bytes, f.optimizer_bytes, f.total_bytes, f.gpu_mem_gib * 2 ** 30 - f.total_bytes AS headroom_bytes,
       f.recompute_s_per_seq, f.overhead_pct, z.recipe, z.accelerator
FROM fits_on AS f
JOIN latest_run AS v ON f.census_version = v.census_version AND f.transformers_version = v.transformers_version
                    AND f.torch_version = v.torch_version AND f.records_version = v.records_version
JOIN fits_on_sizes AS z ON z.plan_version = f.plan_version AND z.gpu_mem_gib = f.gpu_mem_gib
JOIN repos AS r ON r.config_hash = f.config_hash
JOIN specs AS s ON s.config_hash = f.config_hash AND s.census_version = f.census_version
                AND s.transformers_version = f.transformers_version AND s.torch_version = f.torch_version;
