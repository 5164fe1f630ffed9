"""The shape of the code: every module imports alone, no import cycle, one vocabulary, and the
docs name every module and view."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from speccat import sql
from speccat.catalogue.vocabulary import reasons_markdown

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"census": "speccat.census", "catalogue": "speccat.catalogue", "flows": "speccat.flows", "sql": "speccat.sql"}


def modules() -> dict[str, Path]:
    """Every module of the four folders, by its installed dotted name."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports(name: str, path: Path, *, deferred: bool = False) -> set[str]:
    """The speccat modules a module imports: when it is imported, or with `deferred` also those
    imported inside its functions (a cycle through those is hidden, but still a cycle)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree) if deferred else tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from P import m` imports the module P.m where there is one, else names of P
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    # a module's own packages are imported before it anyway: no edge, no cycle
    return {m for m in found if m in MODULES and not name.startswith(m + ".")}


MODULES = modules()


def test_the_import_graph_has_no_cycle():
    graph = {name: imports(name, path, deferred=True) - {name} for name, path in MODULES.items()}
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


def test_dependencies_point_one_way():
    """flows → census → catalogue; catalogue/records and catalogue/store never import each other."""
    order = ["speccat.catalogue", "speccat.census", "speccat.flows"]
    rooms = ("speccat.catalogue.records", "speccat.catalogue.store")
    for name, path in MODULES.items():
        for dep in imports(name, path, deferred=True):
            layer = max((i for i, p in enumerate(order) if name.startswith(p)), default=-1)
            dep_layer = max((i for i, p in enumerate(order) if dep.startswith(p)), default=-1)
            assert dep_layer <= layer, f"{name} imports {dep}: against the direction flows → census → catalogue"
            for room, other in (rooms, rooms[::-1]):
                assert not (name.startswith(room) and dep.startswith(other)), f"{name} imports {dep} across the rooms"


def _import_alone(name: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, env=os.environ.copy())
    return name, done.stderr.strip().splitlines()[-1] if done.returncode else ""


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failed = {name: err for name, err in pool.map(_import_alone, sorted(MODULES)) if err}
    assert not failed


def test_the_readme_reason_table_is_the_vocabulary():
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"<!-- reasons: .*? -->\n(.*?)\n<!-- /reasons -->", readme, re.S)
    assert stated, "README.md has no rendered reason table"
    assert stated.group(1).strip() == reasons_markdown()


def test_architecture_doc_names_every_module_and_view():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(ROOT)) for p in MODULES.values() if p.name != "__init__.py" and str(p.relative_to(ROOT)) not in doc]
    views = re.findall(r"CREATE OR REPLACE VIEW (\w+)", "\n".join(p.read_text() for p in sql.SQL_DIR.rglob("*.sql")))
    missing += [f"view {v}" for v in views if f"`{v}`" not in doc]
    assert views and not missing, missing


def test_no_document_outside_the_repository_is_cited():
    cited = []
    for folder in ("census", "catalogue", "flows", "sql", "docs", "tests", "bench"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sql", ".yaml", ".md"} and path.name != "test_layout.py":
                cited += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1) if "DESIGN" in line]
    cited += [f"README.md:{i}" for i, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1) if "DESIGN" in line]
    assert not cited
