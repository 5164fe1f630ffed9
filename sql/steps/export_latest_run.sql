-- `speccat export`: the night and versions the export's manifest names.
SELECT run_id, census_version, records_version, settings_version FROM latest_run;
