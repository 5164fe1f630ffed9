-- A publish's connection, the catalogue in memory it answers fits_on in, or the report's reads:
-- at most this much memory (catalogue/store/limits.yaml publish_memory_mib, fits_on_memory_mib;
-- report/pages.yaml read_memory_mib), spilling what does not fit into this directory.
SET memory_limit = {{ literal(memory) }};
SET temp_directory = {{ literal(spill) }};
