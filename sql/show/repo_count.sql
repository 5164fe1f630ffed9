-- `speccat show`, for a repo it cannot find: how many repos the catalogue holds.
SELECT count(*) AS repos FROM repos;
