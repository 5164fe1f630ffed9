"""The flags that give a switch set in a training framework (flags.yaml): per framework its
version, source and stack, and per flag the switches whose saves it drops, full recompute, or
why no switch set is what it does. The catalogue holds them as rows: `framework_flags`, one per
flag, and `flag_sets`, every combination of the flags that give switches (one per switch set,
the fewest flags) and each full-recompute flag, with the command line that asks for it; the
view frontier_flags names them beside each frontier set (docs/planning.md, "Flags, not
bitmasks")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations
from pathlib import Path

from speccat.catalogue.datafile import Loader, read_yaml, version_of
from speccat.catalogue.records.frontier import FULL
from speccat.catalogue.records.oprecords import Records, RecordsError

FLAGS_PATH = Path(__file__).with_name("flags.yaml")
FRAMEWORK_KEYS = ("version", "source", "stack", "selective", "flags")
FLAG_KEYS = ("switches", "full", "beyond", "command", "recomputes", "checked")


@dataclass(frozen=True)
class Flag:
    name: str
    switches: tuple[str, ...] | None  # the switches whose saves it drops; None for full recompute or beyond
    full: bool
    beyond: str | None  # why no switch set is what it does
    command: str | None  # how it is written, where it is not one of the framework's selective list
    recomputes: str | None
    checked: str | None


@dataclass(frozen=True)
class Framework:
    name: str
    version: str
    source: str
    stack: str
    selective: str | None  # the command line of selective flags, {flags} standing for them
    flags: tuple[Flag, ...]


class _Loader(Loader):
    error = RecordsError

    def text(self, key: str, value) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail("bad_value", key, f"must be a non-empty string, got {value!r}")
        return value

    def flag(self, key: str, name: str, body, switches: Sequence[str]) -> Flag:
        body = self.mapping(key, body, FLAG_KEYS)
        given = [k for k in ("switches", "full", "beyond") if k in body]
        if len(given) != 1:
            raise self.fail("bad_value", key, f"must give exactly one of switches, full or beyond; gives {given or 'none'}")
        named = body.get("switches")
        if named is not None:
            if not isinstance(named, list) or not named:
                raise self.fail("bad_value", f"{key}.switches", f"must be a non-empty list of switches, got {named!r}")
            for switch in named:
                if switch not in switches:
                    raise self.fail("unknown_switch", f"{key}.switches", f"{switch!r}; switches: {', '.join(switches)}")
        if "full" in body and body["full"] is not True:
            raise self.fail("bad_value", f"{key}.full", f"must be true, got {body['full']!r}")
        if "full" in body and "command" not in body:
            raise self.fail("missing_key", f"{key}.command", "a full-recompute flag needs the command that asks for it")
        beyond = self.text(f"{key}.beyond", body["beyond"]) if "beyond" in body else None
        optional = {k: self.text(f"{key}.{k}", body[k]) if k in body else None for k in ("command", "recomputes", "checked")}
        return Flag(name, tuple(named) if named else None, "full" in body, beyond, **optional)


@cache
def load_flags(switches: tuple[str, ...], path: Path = FLAGS_PATH) -> tuple[tuple[Framework, ...], str]:
    """The frameworks of flags.yaml, each switch checked against `switches` (the records' switch
    names, in mask-bit order), and the file's version."""
    loader = _Loader(path.name)
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("frameworks",), ("frameworks",))
    frameworks = []
    for name, body in loader.mapping("frameworks", top["frameworks"], list(top["frameworks"] or ())).items():
        key = f"frameworks.{name}"
        body = loader.mapping(key, body, FRAMEWORK_KEYS, ("version", "source", "stack", "flags"))
        flags = tuple(loader.flag(f"{key}.flags.{flag}", flag, spec, switches)
                      for flag, spec in loader.mapping(f"{key}.flags", body["flags"], list(body["flags"] or ())).items())  # fmt: skip
        selective = loader.text(f"{key}.selective", body["selective"]) if "selective" in body else None
        if selective is None and any(f.switches for f in flags):
            raise loader.fail("missing_key", f"{key}.selective", "a framework whose flags give switches needs the command line they are written in")
        frameworks.append(Framework(name, loader.text(f"{key}.version", body["version"]), loader.text(f"{key}.source", body["source"]),
                                    loader.text(f"{key}.stack", body["stack"]), selective, flags))  # fmt: skip
    return tuple(frameworks), version_of(data)


def flag_rows(frameworks: Sequence[Framework], records: Records) -> dict[str, list[Mapping]]:
    """`framework_flags` (one row per flag) and `flag_sets` (per framework, each full-recompute
    flag at mask -1, and each switch set some combination of its flags gives, by the fewest
    flags, then the first in file order) as the catalogue holds them."""
    flags, sets = [], []
    for fw in frameworks:
        about = {"framework": fw.name, "version": fw.version, "source": fw.source, "stack": fw.stack}
        for f in fw.flags:
            mask = FULL if f.full else records.mask_of(f.switches) if f.switches else None
            command = f.command or (fw.selective.format(flags=f.name) if f.switches else None)
            flags.append({**about, "flag": f.name, "switches": list(f.switches or ()), "mask": mask, "command": command,
                          "beyond": f.beyond, "recomputes": f.recomputes, "checked": f.checked})  # fmt: skip
            if f.full:
                sets.append({"framework": fw.name, "stack": fw.stack, "mask": FULL, "flags": [f.name], "command": f.command})
        seen: set[int] = set()
        selective = [f for f in fw.flags if f.switches]
        for n in range(1, len(selective) + 1):
            for chosen in combinations(selective, n):
                mask = records.mask_of(s for f in chosen for s in f.switches)
                if mask not in seen:
                    seen.add(mask)
                    names = [f.name for f in chosen]
                    sets.append({"framework": fw.name, "stack": fw.stack, "mask": mask, "flags": names,
                                 "command": fw.selective.format(flags=" ".join(names))})  # fmt: skip
    return {"framework_flags": flags, "flag_sets": sets}
