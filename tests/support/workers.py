"""How pytest-xdist's workers share the suite (`make test` runs `-n auto --dist loadfile`).

A pytest plugin (`pytest_plugins` in tests/conftest.py) that gives `--dist loadfile` a scheduler
of the suite's own (xdist's `pytest_xdist_make_scheduler` hook):

- each test file runs whole on one worker, as loadfile does, so its module fixtures are built
  once;
- every test file that names the session's night (`snapshot_runs`, tests/support/refresh_runs.py:
  every shipped config censused, a minute of both cores) counts as one file with the others
  that name it, so the night runs once in the session, on the worker that runs them all;
- likewise every other test file that names `shipped_spec` (tests/support/shipped_specs.py: each
  shipped config censused once per process, 20 s of CPU for all of them), so the shipped configs
  are censused on one worker, not on each;
- the night's files go first, then LONGEST, then the other files by their number of tests (most
  first), so that no worker is left alone with a long file at the end.

(xdist's own `--dist loadgroup` would group by `xdist_group` marks, but it renames each test's
node id to do so, which pytest 9.2 no longer allows: the marks are ignored.)

Without `-n`, or with another `--dist`, this plugin changes nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest

NIGHT = "the session's night"
SHIPPED = "the shipped specs"
# What a test file names to join a unit, in order: a file naming both joins the first.
UNITS = ((NIGHT, "snapshot_runs"), (SHIPPED, "shipped_spec"))
# Files of one or two tests that take a minute or more: started right after the night's files.
LONGEST = ("tests/census/test_census_registry.py",)


def unit_of_files(root: Path) -> dict[str, str]:
    """Each test file (relative to `root`) that names what a unit of UNITS shares -> that unit."""
    units = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        text = path.read_text()
        unit = next((unit for unit, name in UNITS if name in text), None)
        if unit is not None:
            units[path.relative_to(root).as_posix()] = unit
    return units


def make_scheduler_class():
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        """loadfile, with the files of each unit of UNITS as one, the longest units first."""

        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            self.units = unit_of_files(config.rootpath)
            self.ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return self.units.get(path, path)

        def _assign_work_unit(self, node) -> None:
            # the first assignment finds the whole work queue (scope -> its tests): ordered once
            if not self.ordered:
                rank = {scope: (scope != NIGHT, scope not in LONGEST, -len(tests)) for scope, tests in self.workqueue.items()}
                self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda unit: rank[unit[0]]))
                self.ordered = True
            super()._assign_work_unit(node)

    return FileScheduling


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a hook of xdist's
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    return make_scheduler_class()(config, log)
