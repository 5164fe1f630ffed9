-- View latest_run: the latest good night: the latest, by its start (ties by run_id), of the
-- nights that completed (or completed with some repos failing, `partial`) and listed repos. A
-- night whose listing failed, or that listed nothing, is in runs but never the latest, so
-- every view that means "the latest night" keeps answering from the last good one.
-- Grain: one row (none while no good night is stored).
-- Columns: those of the runs table:
--   run_id                id       the night's id
--   started               time     when the night started (UTC)
--   ended                 time     when it ended (UTC)
--   status                code     completed or partial (vocabulary list run_status)
--   source                code     hub or snapshot (vocabulary list run_source)
--   speccat_version       version  the speccat package
--   transformers_version  version  the transformers package the census built with; with torch and census, keys the specs
--   torch_version         version  the torch package the census ran with
--   census_version        version  the census's version (census/version.py); keys the specs
--   records_version       version  a hash of catalogue/records/records.yaml's content; keys the prices
--   profiles_version      version  a hash of census/structure/profiles/*.yaml's content
--   settings_version      version  a hash of catalogue/records/settings.yaml's content
--   n_repos               count    repos the source listed
--   n_configs             count    distinct configs among them
--   n_specs               count    specs censused that night (carried ones not counted)
--   n_failures            count    repos that failed, with a failures row each
--   reason                code     NULL (a failed night's reason; never the latest)
--   message               text     NULL (a failed night's message)
CREATE OR REPLACE VIEW latest_run AS
SELECT * FROM runs
WHERE status IN ('completed', 'partial') AND n_repos > 0
ORDER BY started DESC, run_id DESC LIMIT 1;
