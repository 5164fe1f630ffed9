-- A publish's connection: at most this much memory (catalogue/store/limits.yaml
-- publish_memory_mib), spilling what does not fit into this directory.
SET memory_limit = {{ literal(memory) }};
SET temp_directory = {{ literal(spill) }};
