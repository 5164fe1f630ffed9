"""The shape of the code: every module imports alone, no import cycle, one vocabulary, and the
docs' generated parts (the rooms' modules and data files, the views, the figures) as the code
draws them now. The direction of imports between the rooms is tests/project/test_imports.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from docs import tables  # noqa: E402
from speccat.catalogue.vocabulary import reasons_markdown  # noqa: E402
from support.imports import imports  # noqa: E402

# every module of every room (docs/rooms.yaml), by its installed dotted name
MODULES = {name: ROOT / path for name, path in tables.modules().items()}


def test_the_import_graph_has_no_cycle():
    # imports inside functions count too: a cycle through those is hidden, but still a cycle;
    # a module's own packages are imported before it anyway: no edge, no cycle
    graph = {
        name: {i.module for i in imports(name, path, MODULES) if i.module != name and not name.startswith(i.module + ".")}
        for name, path in MODULES.items()
    }
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(name) :] + [name]))
        state[name] = "open"
        for dep in sorted(graph[name]):
            visit(dep, trail + [name])
        state[name] = "done"

    for name in sorted(graph):
        visit(name, [])


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    """Each module imported with no other speccat module imported before it: a child forked per
    module from an interpreter that has made only the third-party imports the modules state
    (tests/support/import_alone.py), so torch, transformers and Prefect load once, not per module."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "import_alone.py"), *(f"{name}={path}" for name, path in sorted(MODULES.items()))],
        capture_output=True, text=True, env=os.environ.copy(), timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failed


def test_the_readme_reason_table_is_the_vocabulary():
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"<!-- reasons: .*? -->\n(.*?)\n<!-- /reasons -->", readme, re.S)
    assert stated, "README.md has no rendered reason table"
    assert stated.group(1).strip() == reasons_markdown()


def test_the_docs_generated_parts_are_current():
    """The rooms' tables of modules and data files (docs/architecture.md), the views
    (docs/catalogue.md), the reason table (README.md) and the figures the prose quotes are drawn
    from the code: a module, view or data file added, moved or redescribed makes them stale."""
    stale = tables.stale()
    assert not stale, f"stale generated parts: {', '.join(stale)}; run `.venv/bin/python -m docs.tables` to redraw them"


def test_the_readme_names_the_records_version_the_records_file_states():
    stated = re.search(r"Op records (v\d+):", (ROOT / "catalogue" / "records" / "records.yaml").read_text())
    assert stated and f"records {stated[1]}" in (ROOT / "README.md").read_text()


def test_every_path_the_docs_name_exists():
    """A path into the repository that a doc names (a module, a data file, a test, a glob of
    them) is there: a file moved or renamed is renamed in the docs too. A path is read from the
    repository's root, or from the doc's folder (an image beside the doc); a word in capitals
    stands for any name (`census/kernels/NAME.py`: some module of that folder)."""
    named = re.compile(r"\b((?:census|catalogue|flows|report|sql|tests|bench|docs)/[\w./*-]*\w)")
    placeholder = re.compile(r"(?<![A-Za-z])[A-Z]{2,}(?![a-z])")
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for path in named.findall(line):
                pattern = placeholder.sub("*", path)
                if not any(list(base.glob(pattern)) for base in (ROOT, doc.parent)):
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: {path}")
    assert not missing, "paths the docs name that are not there:\n" + "\n".join(missing)


def test_no_document_outside_the_repository_is_cited():
    cited = []
    for folder in ("census", "catalogue", "flows", "sql", "docs", "tests", "bench"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sql", ".yaml", ".md"} and path.name != "test_layout.py":
                cited += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1) if "DESIGN" in line]
    cited += [f"README.md:{i}" for i, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1) if "DESIGN" in line]
    assert not cited
