"""census: turns a Hugging Face config into a ModelSpec (no Prefect, no Hub).

`config_hash`, `language_config` and `load_config_file` are plain Python; `run_census` imports
torch and transformers on first use, so importing this package stays cheap.
"""

from speccat.census.intake.config import config_hash, language_config, load_config_file
from speccat.census.version import CENSUS_VERSION

__all__ = ["CENSUS_VERSION", "config_hash", "language_config", "load_config_file", "run_census"]


def __getattr__(name: str):
    if name == "run_census":
        from speccat.census.census import run_census

        return run_census
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
