-- Report query run: the night the report shows (the view latest_run), for the page headers and
-- the coverage figures.
-- Grain: one row (none while no good night is stored).
-- Columns: those of latest_run (run_id, started, status, source, the versions, n_repos,
-- n_configs, n_specs, n_failures, ...).
SELECT * FROM latest_run;
