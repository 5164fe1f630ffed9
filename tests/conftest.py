"""Shared test fixtures: the shipped snapshot of real Hub configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# The refresh tests' session fixtures (one Prefect API, the shared snapshot runs), and how
# pytest-xdist's workers share the suite (each file whole on one worker).
pytest_plugins = ["support.refresh_runs", "support.workers"]

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "flows" / "snapshot"


def shipped_config_paths() -> list[Path]:
    """Every config.json the project ships as its offline snapshot, sorted by folder."""
    return sorted(SNAPSHOT.glob("*/config.json"))


def repo_id_of(path: Path) -> str:
    """`org__name/config.json` → `org/name`."""
    return path.parent.name.replace("__", "/", 1)


def load_shipped(repo_id: str) -> dict:
    return json.loads((SNAPSHOT / repo_id.replace("/", "__", 1) / "config.json").read_text())


@pytest.fixture(scope="session")
def snapshot_dir() -> Path:
    return SNAPSHOT


@pytest.fixture(scope="session")
def records():
    """The shipped op records (catalogue/records/records.yaml)."""
    from speccat.catalogue.records.oprecords import load_records

    return load_records()


@pytest.fixture(scope="session")
def grid():
    """The shipped settings grid (catalogue/records/settings.yaml)."""
    from speccat.catalogue.records.settings import load_settings

    return load_settings()
