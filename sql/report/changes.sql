-- Report query changes: what the latest night changed against the one before (the view
-- changes): repos added, removed, with a new config or sha, repriced, still failing, and
-- per kind the bytes that moved, with the library versions of both nights.
-- Grain: one row per row of the view changes.
-- Columns: those of the view changes.
SELECT * FROM changes
ORDER BY change, repo_id, kind NULLS FIRST;
