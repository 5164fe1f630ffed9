"""The docs' generated parts, drawn from the code and its data: `python -m docs.tables`.

A generated part of a doc sits between two markers, `<!-- NAME: what draws it -->` and
`<!-- /NAME -->`: a table on the lines between them, or a figure inline. Each part is drawn
from what it describes, never written by hand: the rooms' modules (each module's docstring's
first sentence) and data files (a YAML file's leading comment's first sentence, or its group
in docs/rooms.yaml), the views (each sql/views/*.sql header), the README's reason table (the
vocabulary), docs/census.md's variant facts (the vocabulary and the census's variant readers),
and the figures the prose quotes. `python -m docs.tables` rewrites every part in
place; `--check` only names the stale ones and exits 1. tests/project/test_layout.py fails on a
stale part and names this command.

docs/rooms.yaml is the one statement of the rooms and the direction of their imports: this
module reads it for the tables, and tests/project/test_imports.py for the imports.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

import yaml

ROOT = Path(__file__).resolve().parents[1]
ROOMS_PATH = ROOT / "docs" / "rooms.yaml"
COMMAND = "python -m docs.tables"
# what an installed module is called: the folders install under this namespace (pyproject.toml)
NAMESPACE = "speccat"

# a sentence ends at . ! or ? before a space (so "docs/census.md" does not end one, nor do
# "e.g." and "i.e."), or at the end of its paragraph
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s|$)")


@dataclass(frozen=True)
class Room:
    """A room of the code: its name, the paths it holds, what it is for, and the rooms it may
    import (its own always)."""

    name: str
    paths: tuple[str, ...]
    about: str
    imports: tuple[str, ...]


@dataclass(frozen=True)
class Group:
    """Data files described together: a glob over paths from the repository root."""

    files: str
    about: str

    def holds(self, path: str) -> bool:
        return re.fullmatch(_glob_pattern(self.files), path) is not None


def _glob_pattern(glob: str) -> str:
    """A path glob as a regular expression: `*` within one folder, `**` across folders."""
    parts = re.split(r"(\*\*|\*)", glob)
    return "".join({"**": ".*", "*": "[^/]*"}.get(part, re.escape(part)) for part in parts)


@cache
def _rooms_file() -> Mapping:
    return yaml.safe_load(ROOMS_PATH.read_text())


@cache
def rooms() -> tuple[Room, ...]:
    """docs/rooms.yaml's rooms in dependency order, each with the rooms it may import resolved
    (`above`: every room above it). A room that names itself, a room below it or no room is refused."""
    found: list[Room] = []
    for entry in _rooms_file()["rooms"]:
        above = [room.name for room in found]
        imports = entry["imports"]
        if imports == "above":
            imports = above
        wrong = [name for name in imports if name not in above]
        if wrong:
            raise ValueError(f"{ROOMS_PATH.name}: room {entry['room']!r} imports {wrong}, which are not rooms above it")
        missing = [p for p in entry["paths"] if not (ROOT / p).exists()]
        if missing:
            raise ValueError(f"{ROOMS_PATH.name}: room {entry['room']!r} holds {missing}, which do not exist")
        found.append(Room(entry["room"], tuple(entry["paths"]), entry["about"], tuple(imports)))
    return tuple(found)


@cache
def groups() -> tuple[Group, ...]:
    """docs/rooms.yaml's groups of data files described together."""
    return tuple(Group(entry["files"], entry["about"]) for entry in _rooms_file()["groups"])


def room_of(path: str) -> Room:
    """The room of a path from the repository root: the one of the longest path that holds it."""
    holding = [(len(p), room) for room in rooms() for p in room.paths if path == p or path.startswith(p + "/")]
    if not holding:
        raise ValueError(f"{path}: in no room of {ROOMS_PATH.name}")
    return max(holding, key=lambda pair: pair[0])[1]


def code_files() -> list[str]:
    """Every file of every room, as a path from the repository root, sorted (caches left out)."""
    tops = sorted({PurePosixPath(p).parts[0] for room in rooms() for p in room.paths})
    found = []
    for top in tops:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append(path.relative_to(ROOT).as_posix())
    return sorted(found)


def module_name(path: str) -> str:
    """The installed name of a module file: census/intake/config.py -> speccat.census.intake.config."""
    parts = PurePosixPath(path).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((NAMESPACE, *parts))


def modules() -> dict[str, str]:
    """Every module of every room by its installed name: its path from the repository root."""
    return {module_name(path): path for path in code_files() if path.endswith(".py")}


def first_sentence(text: str) -> str:
    """The first sentence of a text's first paragraph, on one line."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[: end.end()] if end else paragraph


def module_about(path: str) -> str:
    """The first sentence of a module's docstring; a module without one is refused."""
    doc = ast.get_docstring(ast.parse((ROOT / path).read_text()))
    if not doc:
        raise ValueError(f"{path}: no docstring; its first sentence is its line in docs/architecture.md")
    return first_sentence(doc)


def leading_comment(path: str) -> str:
    """A data file's leading `#` comment, without the marks ('' when it has none)."""
    lines = []
    for line in (ROOT / path).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return "\n".join(lines)


def data_rows(paths: list[str]) -> list[tuple[str, str]]:
    """(file, holds) of a room's data files, as table cells: a group's row once, with its count
    of files, or a YAML file's own. A file neither in a group nor a YAML file with a leading comment is refused."""
    rows: list[tuple[str, str]] = []
    grouped: dict[Group, int] = {}
    for path in paths:
        group = next((g for g in groups() if g.holds(path)), None)
        if group is not None:
            grouped[group] = grouped.get(group, 0) + 1
        elif path.endswith(".yaml") and leading_comment(path):
            rows.append((f"`{path}`", first_sentence(leading_comment(path))))
        else:
            raise ValueError(f"{path}: a data file with no leading comment and no group in {ROOMS_PATH.name}")
    for group in groups():
        if group in grouped:
            count = f"`{group.files}` ({grouped[group]} files)" if "*" in group.files else f"`{group.files}`"
            rows.append((count, f"{group.about}."))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rooms_markdown() -> str:
    """docs/architecture.md's rooms: per room, what it is for, the rooms it may import, and a
    table of its modules and data files."""
    files = code_files()
    out = []
    for room in rooms():
        own = [path for path in files if room_of(path) is room]
        # each folder's modules together, its __init__.py first
        code = sorted((p for p in own if p.endswith(".py")), key=lambda p: (str(PurePosixPath(p).parent), not p.endswith("__init__.py"), p))
        rows = [(f"`{p}`", module_about(p)) for p in code]
        rows += data_rows([p for p in own if not p.endswith(".py")])
        may = ", ".join(f"`{name}`" for name in room.imports) or "no other room"
        out += [f"### `{room.name}`", "", f"{room.about} Imports {may}.", ""]
        out += ["| file | holds |", "|---|---|", *(f"| {what} | {_cell(about)} |" for what, about in rows), ""]
    return "\n".join(out).rstrip("\n")


def view_header(name: str) -> tuple[str, str]:
    """(what it answers, its grain) from a view's header: the first sentence after `View NAME:`
    and the `Grain:` line."""
    from speccat import sql

    header = sql.header(f"views/{name}")
    lead, _, rest = header.partition("\nGrain:")
    grain = rest.partition("\nColumns:")[0]
    if not lead.startswith(f"View {name}:") or not grain:
        raise ValueError(f"sql/views/{name}.sql: its header does not open with `View {name}:` and state its `Grain:`")
    answers = first_sentence(lead.removeprefix(f"View {name}:"))
    return answers, " ".join(grain.split()).rstrip(".")


def views_markdown() -> str:
    """docs/catalogue.md's table of views, by name, from their headers."""
    from speccat import sql
    from speccat.catalogue.store.comments import view_columns

    lines = ["| view | what it answers | grain: one row per | columns |", "|---|---|---|---|"]
    for name in sorted(sql.views()):
        answers, grain = view_header(name)
        columns = ", ".join(view_columns(name))
        lines.append(f"| `{name}` | {_cell(answers)} | {_cell(grain.removeprefix('one row per '))} | {columns} |")
    return "\n".join(lines)


def reasons_markdown() -> str:
    """The README's reason table, as the vocabulary renders it."""
    from speccat.catalogue.vocabulary import reasons_markdown as render

    return render()


def variant_facts() -> str:
    """docs/census.md's table of the variant facts, as census/describe/variants.py renders it from
    the vocabulary and the registered readers."""
    from speccat.census.describe.variants import variants_markdown

    return variants_markdown()


def shipped_configs() -> str:
    """How many configs the snapshot ships."""
    return str(len(list((ROOT / "flows" / "snapshot").glob("*/config.json"))))


def switch_sets() -> str:
    """How many switch sets the op records price (every combination of their switches)."""
    from speccat.catalogue.records.oprecords import load_records

    return str(load_records().n_masks)


def hostile_cases() -> str:
    """How many cases the hostile config corpus holds (tests/support/hostile/expected.yaml)."""
    return str(len(yaml.safe_load((ROOT / "tests" / "support" / "hostile" / "expected.yaml").read_text())))


def grid_settings() -> str:
    """How many settings the grid of catalogue/records/settings.yaml has."""
    from speccat.catalogue.records.settings import load_settings

    return str(len(load_settings().settings))


# Every generated part: doc -> {marker name: what draws it}.
PARTS: Mapping[str, Mapping[str, Callable[[], str]]] = {
    "README.md": {"reasons": reasons_markdown, "switch_sets": switch_sets, "hostile_cases": hostile_cases},
    "docs/architecture.md": {"rooms": rooms_markdown},
    "docs/catalogue.md": {"views": views_markdown},
    "docs/census.md": {"variants": variant_facts},
    "docs/planning.md": {"grid_settings": grid_settings},
    "docs/refresh.md": {"shipped_configs": shipped_configs},
}


def render(text: str, parts: Mapping[str, Callable[[], str]], doc: str) -> str:
    """`text` with each named part redrawn between its markers: a part whose old text opens with
    a line break is a block (drawn on the lines between), any other inline."""
    for name, draw in parts.items():
        marker = re.compile(rf"(<!-- {name}: [^\n]*?-->)(.*?)(<!-- /{name} -->)", re.S)
        found = marker.findall(text)
        if len(found) != 1:
            raise ValueError(f"{doc}: needs one generated part `<!-- {name}: ... -->` ... `<!-- /{name} -->`, has {len(found)}")
        drawn = draw()
        block = found[0][1].startswith("\n")
        text = marker.sub(lambda m: m[1] + (f"\n{drawn}\n" if block else drawn) + m[3], text)
    return text


def stale() -> list[str]:
    """`doc: part` for each generated part that differs from what the code draws now, or that
    cannot be drawn (with why)."""
    out = []
    for doc, parts in PARTS.items():
        text = (ROOT / doc).read_text()
        for name, draw in parts.items():
            try:
                if render(text, {name: draw}, doc) != text:
                    out.append(f"{doc}: {name}")
            except ValueError as err:  # no markers, or a part the code cannot draw: say which
                out.append(f"{doc}: {name} ({err})")
    return out


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    if argv == ["--check"]:
        found = stale()
        for line in found:
            print(f"stale: {line}")
        return 1 if found else 0
    # every part drawn before any doc is written: a part that cannot be drawn changes nothing
    drawn = {doc: render((ROOT / doc).read_text(), parts, doc) for doc, parts in PARTS.items()}
    for doc, new in drawn.items():
        if new != (ROOT / doc).read_text():
            (ROOT / doc).write_text(new)
            print(f"rewrote {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
