"""The versions a stored result depends on: the runs table's version columns, read from the
installed packages and from speccat's own data files, without importing torch or Prefect."""

from __future__ import annotations

from importlib.metadata import version as dist_version


def current_versions() -> dict[str, str]:
    """Every version a stored result depends on (the runs table's version columns)."""
    from speccat.catalogue.records.cost import load_costs, stored_version
    from speccat.catalogue.records.ends import load_ends
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings
    from speccat.census import CENSUS_VERSION
    from speccat.census.structure.family import profiles_version

    records = load_records()
    return {
        "speccat": dist_version("speccat"),
        "transformers": dist_version("transformers"),
        "torch": dist_version("torch"),
        "census": CENSUS_VERSION,
        "records": stored_version(records, load_costs(records), load_ends(records)),
        "profiles": profiles_version(),
        "settings": load_settings().version,
    }
