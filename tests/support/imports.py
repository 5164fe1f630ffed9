"""What a speccat module imports, read from its source with `ast` (nothing is imported): the
import checks of tests/project (the rooms' direction, private names, cycles) share it."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One speccat module a module imports: `module` is the module itself, or the package whose
    names `from P import a, b` takes (`names`); `deferred` when it is imported inside a function."""

    module: str
    line: int
    names: tuple[str, ...]
    deferred: bool


def is_private(name: str) -> bool:
    """`_name` is private to its module; `__name__` and the like are not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from ... import` names, its dots resolved against `package`."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".")
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(parts + ([base] if base else []))


def _top_level(tree: ast.Module) -> set[int]:
    """The ids of the import nodes run when the module is imported (not inside a function)."""
    found: set[int] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.add(id(child))
            walk(child)

    walk(tree)
    return found


def imports(name: str, path: Path, known: Mapping[str, object]) -> list[Import]:
    """Every import of a speccat module in `known` (installed name -> anything) that the module
    `name` at `path` makes, at its top or inside its functions. `from P import m` imports the
    module P.m where there is one, else names of P."""
    package = _package_of(name, path)
    tree = ast.parse(path.read_text())
    top = _top_level(tree)
    found = []
    for node in ast.walk(tree):
        deferred = id(node) not in top
        if isinstance(node, ast.Import):
            found += [Import(a.name, node.lineno, (), deferred) for a in node.names if a.name in known]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.append(Import(f"{base}.{alias.name}", node.lineno, (), deferred))
                else:
                    names.append(alias.name)
            if names and base in known:
                found.append(Import(base, node.lineno, tuple(names), deferred))
    return found


def module_attributes(name: str, path: Path, known: Mapping[str, object]) -> Iterator[tuple[str, str, int]]:
    """(module, attribute, line) for each attribute of a speccat module the module reads through
    a name an import bound to it: `m.x` after `import speccat.a.m as m` or `from speccat.a import
    m`, and `speccat.a.m.x` after `import speccat.a.m`."""
    package = _package_of(name, path)
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    bound[alias.asname] = alias.name
                elif not alias.asname and alias.name.startswith("speccat."):
                    bound["speccat"] = "speccat"
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        dotted = bound[value.id]
        # walk the chain while it names modules; the first name that is not one is read from the last module
        for attr in reversed(chain):
            if f"{dotted}.{attr}" in known:
                dotted = f"{dotted}.{attr}"
                continue
            if dotted in known:
                yield dotted, attr, node.lineno
            break
