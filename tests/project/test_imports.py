"""Every module's imports, read with `ast` (nothing is imported), held to the house's two rules:
dependencies point one way between the rooms (docs/rooms.yaml, the one statement of the rooms
and their order), and no module reads another module's private (`_name`) names. Each failure
names every violation, one per line, with the file and line that makes it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from docs import tables  # noqa: E402
from support.imports import imports, is_private, module_attributes  # noqa: E402

MODULES = tables.modules()


def room_violations() -> list[str]:
    """`file:line imports M: room A may not import room B` for each import against the rooms'
    direction, inside functions too (a deferred import is a dependency all the same)."""
    found = []
    for name, path in MODULES.items():
        room = tables.room_of(path)
        for imp in imports(name, ROOT / path, MODULES):
            target = tables.room_of(MODULES[imp.module])
            if target is not room and target.name not in room.imports:
                found.append(f"{path}:{imp.line} imports {imp.module}: room {room.name} may not import room {target.name}")
    return sorted(set(found))


def private_violations() -> list[str]:
    """`file:line reads M._name` for each private name a module takes from another speccat
    module: `from M import _name`, or `_name` read as an attribute of M."""
    found = []
    for name, path in MODULES.items():
        for imp in imports(name, ROOT / path, MODULES):
            leaf = imp.module.rsplit(".", 1)[1]
            if not imp.names and is_private(leaf):
                found.append(f"{path}:{imp.line} imports the private module {imp.module}")
            found += [f"{path}:{imp.line} imports {n} from {imp.module}, a private name of it" for n in imp.names if is_private(n)]
        for module, attr, line in module_attributes(name, ROOT / path, MODULES):
            if module != name and is_private(attr):
                found.append(f"{path}:{line} reads {module}.{attr}, a private name of it")
    return sorted(set(found))


def test_the_rooms_file_states_every_room_in_dependency_order():
    rooms = tables.rooms()
    names = [room.name for room in rooms]
    assert len(set(names)) == len(names)
    for i, room in enumerate(rooms):
        assert set(room.imports) <= set(names[:i]), f"{room.name} imports a room below it"
    # every module is in a room, and each census stage reads only the stages before it
    assert {tables.room_of(path).name for path in MODULES.values()} == set(names)
    stages = ["census/intake", "census/structure", "census/kernels", "census/build", "census/measure", "census/describe", "census"]
    for earlier, later in zip(stages, stages[1:]):
        later_room = rooms[names.index(later)]
        assert earlier in later_room.imports and later not in rooms[names.index(earlier)].imports


def test_the_census_and_the_pricing_room_stay_apart_from_the_rooms_that_use_them():
    """The census never reads pricing, the store, the flows or the report; pricing never reads
    the store, the flows or the report; the store never reads the flows or the report."""
    rooms = {room.name: room for room in tables.rooms()}
    census = {name for name in rooms if name.startswith("census")}
    for name in census:
        assert set(rooms[name].imports) <= census | {"catalogue"}, name
    assert not {"catalogue/store", "flows", "report", *census} & set(rooms["catalogue/records"].imports)
    assert not {"catalogue/records", "flows", "report", *census} & set(rooms["catalogue/store"].imports)


def test_dependencies_point_the_way_the_rooms_are_ordered():
    violations = room_violations()
    assert not violations, f"{len(violations)} imports against docs/rooms.yaml:\n" + "\n".join(violations)


def test_no_module_reads_another_modules_private_names():
    violations = private_violations()
    assert not violations, f"{len(violations)} private names read across modules (make them public and documented):\n" + "\n".join(violations)


def test_the_checks_see_a_violation_of_each_kind(tmp_path):
    """The readers catch what the checks look for: a census stage importing a later stage, a
    private name imported, a private name read as a module's attribute."""
    stage = tmp_path / "stage.py"
    stage.write_text(
        "from speccat.census.measure.probe import probe_layer, _private\n"
        "import speccat.census.structure.family as fam\n"
        "def f():\n    from speccat.catalogue.records import settings\n    return fam._families, settings\n"
    )
    found = imports("speccat.census.build.stage", stage, MODULES)
    assert [(i.module, i.names, i.deferred) for i in found] == [
        ("speccat.census.measure.probe", ("probe_layer", "_private"), False),
        ("speccat.census.structure.family", (), False),
        ("speccat.catalogue.records.settings", (), True),
    ]
    build = next(r for r in tables.rooms() if r.name == "census/build")
    assert [tables.room_of(MODULES[i.module]).name in build.imports for i in found] == [False, True, False]
    assert list(module_attributes("speccat.census.build.stage", stage, MODULES)) == [("speccat.census.structure.family", "_families", 5)]
