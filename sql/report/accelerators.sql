-- Report query accelerators: the memory sizes the "what fits" plot is drawn for: the
-- accelerators table (catalogue/records/accelerators.yaml, the latest night's), one row per
-- distinct memory size, named by its accelerators.
-- Grain: one row per memory size.
-- Columns:
--   memory_bytes   bytes  an accelerator's memory
--   accelerators   list   the accelerators with that memory
SELECT memory_bytes, list(accelerator ORDER BY accelerator) AS accelerators
FROM accelerators
GROUP BY memory_bytes
ORDER BY memory_bytes;
