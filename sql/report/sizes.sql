-- Report query sizes: the memory sizes the "what fits" plot is drawn for: those the table
-- fits_on answers at (fits_on_sizes, catalogue/records/fits_on.yaml), with the accelerators sold
-- at about each size.
-- Grain: one row per memory size.
-- Columns:
--   gpu_mem_gib    count  the memory a rank may hold, in GiB
--   accelerators   text   the accelerators sold at about that size
SELECT gpu_mem_gib, accelerators
FROM fits_on_sizes
ORDER BY gpu_mem_gib;
