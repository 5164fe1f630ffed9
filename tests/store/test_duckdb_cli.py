"""The documented duckdb CLI recipe (docs/catalogue.md, "In the duckdb CLI") runs against a
built catalogue: the CLI the test extras pin is the engine's exact version, reads the file
read-only beside another reader, and loads the same DuckLake extension binaries."""

from __future__ import annotations

import csv
import io

import subprocess
from importlib.metadata import version
from pathlib import Path

import duckdb
import pytest
from support import store_runs as runs
from conftest import ROOT

from speccat.catalogue.store.file import open_readonly
from speccat.catalogue.store.lake import extension_path

CLI = Path(__import__("duckdb_cli").__file__).with_name("duckdb")


def cli(*args: str, script: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], input=script, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_pinned_cli_is_the_engines_version():
    assert version("duckdb-cli") == duckdb.__version__
    assert cli("--version").stdout.startswith(f"v{duckdb.__version__} ")


def test_the_documented_recipe_answers_read_only_beside_another_reader():
    db = runs.two_night_catalogue()
    other = open_readonly(db)  # a reader (this process) holds it too: -readonly does not mind
    try:
        done = cli(
            "-readonly", "-csv", str(db),
            script=f"SET VARIABLE repo_id = '{runs.ADDED}';\n.read sql/queries/masks_ranked.sql\n",
        )  # fmt: skip
        expected = other.execute(
            "SELECT count(*) FROM model_prices m JOIN latest_run v USING (census_version, records_version, transformers_version, torch_version) "
            "WHERE m.config_hash = (SELECT config_hash FROM repos WHERE repo_id = ?) "
            "AND m.setting_id IN (SELECT setting_id FROM chosen_settings)",
            [runs.ADDED],
        ).fetchone()[0]
    finally:
        other.close()
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert done.stdout.startswith("setting_id,setting_label,rank,mask,switch_set")
    # one row per distinct result; every one of the 256 sets is in one
    assert sum(int(r["n_equivalent"]) for r in rows) == expected == 256


@pytest.mark.parametrize("name", ["ducklake", "sqlite_scanner"])
def test_the_cli_loads_the_lake_extensions_the_engine_uses(name):
    done = cli("-c", f"LOAD '{extension_path(name)}'; SELECT extension_name, loaded FROM duckdb_extensions() WHERE extension_name = '{name}';")
    assert done.returncode == 0, done.stderr
    assert name in done.stdout and "true" in done.stdout
