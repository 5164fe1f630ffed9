"""The op records (catalogue/records/records.yaml, docs/pricing.md): loader, slot evaluation, switch sets.

The records' content is the switch sections of catalogue/shared.yaml (the switches, and the
switch that drops each op and part: the census measures them too) followed by records.yaml.
`load_records()` parses and validates both into a `Records`. Every refusal is a RecordsError
whose message names the file and the key (`records.yaml: slots.qkv.ops.attMX: ...`,
`shared.yaml: ops.gather.switch: ...`) and whose `reason` is stable. Expressions are compiled
once (catalogue/records/expr.py); the loader also checks that every name they read is one a
layer supplies (catalogue/records/names.py), a derived name defined above it, or `total` in a
slot formula.

A switch set is numbered by its `mask`: bit i set when switch i (in `Records.switches` order)
is recomputed. An op or part is dropped by a switch set when its own switch bit is set (a part
also when its op is); ops without a switch are kept by every switch set. Full recompute is the
`full` formula.

A joint (records.yaml `joint`) is one storage several ops (or parts) keep, which a slot prices
once, as an element of its own: it is kept while any op keeping it is kept, and dropped only by
a switch set that drops them all (persimmon's fused q/k/v output, which its QK-norms and its
attention kernel both keep).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from speccat.catalogue.datafile import Loader, read_yaml, version_of
from speccat.catalogue.errors import ReasonError
from speccat.catalogue.records.expr import FUNCTIONS, Expr, ExprError
from speccat.catalogue.records.names import LAYER_NAMES, TOTAL
from speccat.catalogue.records.working_records import WorkingSet, parse_working_set
from speccat.catalogue.shared import SHARED_PATH, SWITCH_SECTIONS, switch_sections
from speccat.catalogue.vocabulary import OPS, PARTS

RECORDS_PATH = Path(__file__).with_name("records.yaml")
MAX_SWITCHES = 15  # masks are stored as int16

FILE_KEYS = ("names", "defaults", "tolerance", "full", "joint", "slots", "working_set")  # what records.yaml states
REQUIRED_FILE = ("tolerance", "full", "slots")
REQUIRED_SWITCH = ("switches", "ops")  # of catalogue/shared.yaml's SWITCH_SECTIONS
TOP_KEYS = (*SWITCH_SECTIONS, *FILE_KEYS)  # the records' whole content, in order
REQUIRED_TOP = (*REQUIRED_SWITCH, *REQUIRED_FILE)
OP_KEYS = ("switch",)
PART_KEYS = ("part_of", "switch")
SLOT_KEYS = ("part", "formula", "ops", "when")
REQUIRED_SLOT = ("part", "formula", "ops")


class RecordsError(ReasonError):
    """A records file (or a switch name) refused; the message names the file and the key."""

    group = "records"


@dataclass(frozen=True)
class OpRecord:
    """One op's or part's record. `part_of` is set for parts only."""

    name: str
    switch: str | None
    part_of: str | None = None


@dataclass(frozen=True)
class Slot:
    """An activation formula over `total`, the sum of the kept ops' elements."""

    name: str
    part: str
    formula: Expr
    elements: tuple[tuple[str, Expr], ...]  # (op or part, its elements), in file order
    when: Expr | None

    def applies(self, names: Mapping[str, Any]) -> bool:
        return self.when is None or bool(self.when(names))

    def total(self, names: Mapping[str, Any], kept: Collection[str]) -> int | float:
        """The sum, in file order, of the elements of the ops and parts in `kept`.

        Dropped ops' expressions are not evaluated. The sum starts from 0.0, so it is a float.
        """
        total = 0.0
        for name, expr in self.elements:
            if name in kept:
                total = total + expr(names)
        return total

    def value(self, names: MutableMapping[str, Any], kept: Collection[str]) -> int | float:
        """The formula at the kept elements' total. Binds `total` in `names`."""
        return self.at_total(names, self.total(names, kept))

    def at_total(self, names: MutableMapping[str, Any], total: int | float) -> int | float:
        names[TOTAL] = total
        return self.formula(names)


@dataclass(frozen=True, eq=False)
class Records:
    """A validated records file. `version` is a short hash of its canonical content."""

    version: str
    switches: tuple[str, ...]
    ops: Mapping[str, OpRecord]
    parts: Mapping[str, OpRecord]
    derived: Mapping[str, Expr]
    defaults: Mapping[str, int | float]
    tolerance: float  # the largest share a price may be off what the census measured
    full: Expr
    slots: tuple[Slot, ...]
    working_set: WorkingSet | None = None  # the backward's working set (catalogue/records/working.py), when the records price it
    joints: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))  # joint -> the ops and parts keeping it

    @property
    def n_masks(self) -> int:
        return 1 << len(self.switches)

    def mask_of(self, names: Iterable[str]) -> int:
        """The `mask` of the switch set recomputing exactly the switches named. An unknown name is refused."""
        mask = 0
        for name in names:
            if name not in self.switches:
                raise RecordsError(
                    "unknown_switch", f"unknown switch {name!r}; the switches are {', '.join(self.switches)}"
                )
            mask |= 1 << self.switches.index(name)
        return mask

    def switches_of(self, mask: int) -> tuple[str, ...]:
        """The switch names the switch set `mask` recomputes, in mask-bit order."""
        if not 0 <= mask < self.n_masks:
            raise RecordsError("bad_value", f"mask {mask} is outside 0..{self.n_masks - 1}")
        return tuple(s for i, s in enumerate(self.switches) if mask >> i & 1)

    def kept(self, mask: int) -> frozenset[str]:
        """The ops and parts whose saves the switch set `mask` keeps."""
        return self._kept[mask]

    @cached_property
    def _kept(self) -> tuple[frozenset[str], ...]:
        return tuple(self._compute_kept(mask) for mask in range(self.n_masks))

    def _compute_kept(self, mask: int) -> frozenset[str]:
        def dropped(record: OpRecord) -> bool:
            return record.switch is not None and bool(mask >> self.switches.index(record.switch) & 1)

        ops = {name for name, rec in self.ops.items() if not dropped(rec)}
        parts = {name for name, rec in self.parts.items() if rec.part_of in ops and not dropped(rec)}
        joints = {name for name, keepers in self.joints.items() if not ops.isdisjoint(keepers) or not parts.isdisjoint(keepers)}
        return frozenset(ops | parts | joints)


# ----------------------------------------------------------------------------------- loading


class _Loader(Loader):
    """Validation of one parsed records file."""

    error = RecordsError

    def identifier(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.isidentifier() or value.startswith("_"):
            raise self.fail("bad_value", key, f"must be an identifier not starting with '_', got {value!r}")
        return value

    def expr(self, key: str, value: Any, known: Collection[str]) -> Expr:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.fail("bad_expression", key, f"must be an expression (text or a number), got {value!r}")
        try:
            expr = Expr(str(value))
        except ExprError as err:
            raise self.fail("bad_expression", key, f"{err} [{err.reason}]") from None
        unknown = sorted(expr.names - set(known))
        if unknown:
            raise self.fail("unknown_name", key, f"unknown name(s) {', '.join(unknown)} in {value!r}")
        return expr

    def switches(self, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail("bad_value", "switches", "must be a non-empty list of switch names in mask-bit order")
        if len(value) > MAX_SWITCHES:
            raise self.fail("bad_value", "switches", f"at most {MAX_SWITCHES} switches, got {len(value)}")
        names = tuple(self.identifier(f"switches[{i}]", s) for i, s in enumerate(value))
        if len(set(names)) != len(names):
            raise self.fail("bad_value", "switches", f"names a switch twice: {list(names)}")
        return names

    def record(self, key: str, name: str, body: Any, switches, is_part: bool) -> OpRecord:
        keys = PART_KEYS if is_part else OP_KEYS
        body = self.mapping(key, body, keys, keys)
        switch = body["switch"]
        if switch is not None and switch not in switches:
            raise self.fail("unknown_switch", f"{key}.switch", f"unknown switch {switch!r}; switches: {', '.join(switches)}")
        if is_part:
            if switch is None:
                raise self.fail("bad_value", f"{key}.switch", "a part needs a switch of its own")
            if body["part_of"] not in OPS:
                raise self.fail("unknown_op", f"{key}.part_of", f"unknown op {body['part_of']!r}; ops: {', '.join(OPS)}")
            return OpRecord(name, switch, body["part_of"])
        return OpRecord(name, switch)

    def ops(self, value: Any, switches) -> dict[str, OpRecord]:
        self.mapping("ops", value, OPS, OPS, what="op", unknown="unknown_op", missing="missing_op")
        return {name: self.record(f"ops.{name}", name, value[name], switches, False) for name in OPS}

    def parts(self, value: Any, switches) -> dict[str, OpRecord]:
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise self.fail("bad_value", "parts", "must map each part to its record")
        parts = {}
        for name, body in value.items():
            key = f"parts.{name}"
            self.identifier(key, name)
            if name in OPS:
                raise self.fail("bad_value", key, "a part may not share an op's name")
            parts[name] = self.record(key, name, body, switches, True)
        return parts

    def claims(self, switches, records: Iterable[OpRecord]) -> None:
        owner: dict[str, str] = {}
        for rec in records:
            if rec.switch is None:
                continue
            where = f"{'parts' if rec.part_of else 'ops'}.{rec.name}.switch"
            if rec.switch in owner:
                raise self.fail("bad_value", where, f"switch {rec.switch!r} already drops {owner[rec.switch]!r}")
            owner[rec.switch] = rec.name
        for i, switch in enumerate(switches):
            if switch not in owner:
                raise self.fail("unknown_switch", f"switches[{i}]", f"switch {switch!r} drops no op or part")

    def joints(self, value: Any, ops, parts) -> dict[str, tuple[str, ...]]:
        """joint -> the ops and parts keeping it: two or more, each an op or part of the records."""
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise self.fail("bad_value", "joint", "must map each joint to the ops keeping it")
        joints = {}
        for name, keepers in value.items():
            key = f"joint.{name}"
            self.identifier(key, name)
            if name in ops or name in parts:
                raise self.fail("bad_value", key, "a joint may not share an op's or a part's name")
            if not isinstance(keepers, list) or len(set(map(str, keepers))) < 2 or len(set(map(str, keepers))) != len(keepers):
                raise self.fail("bad_value", key, f"must list two or more distinct ops or parts keeping it, got {keepers!r}")
            unknown = [k for k in keepers if k not in ops and k not in parts]
            if unknown:
                raise self.fail("unknown_op", key, f"unknown op or part {unknown[0]!r}; ops: {', '.join(ops)}; parts: {', '.join(parts)}")
            joints[name] = tuple(keepers)
        return joints

    def derived(self, value: Any) -> dict[str, Expr]:
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise self.fail("bad_value", "names", "must map each derived name to its expression")
        known = set(LAYER_NAMES)
        derived = {}
        for name, text in value.items():
            key = f"names.{name}"
            self.identifier(key, name)
            if name in LAYER_NAMES or name in (TOTAL, *FUNCTIONS):
                raise self.fail("bad_value", key, f"{name!r} is a name a layer supplies (or reserved)")
            derived[name] = self.expr(key, text, known)
            known.add(name)
        return derived

    def defaults(self, value: Any) -> dict[str, int | float]:
        value = {} if value is None else value
        if not isinstance(value, Mapping):
            raise self.fail("bad_value", "defaults", "must map layer names to numbers")
        for name, number in value.items():
            if name not in LAYER_NAMES:
                raise self.fail("unknown_name", f"defaults.{name}", f"not a name a layer may hold; names: {', '.join(sorted(LAYER_NAMES))}")
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise self.fail("bad_value", f"defaults.{name}", f"must be a number, got {number!r}")
        return dict(value)

    def tolerance(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise self.fail("bad_value", "tolerance", f"must be a share between 0 and 1, got {value!r}")
        return float(value)

    def slot(self, name: str, body: Any, known, elements_allowed) -> Slot:
        key = f"slots.{name}"
        self.identifier(key, name)
        body = self.mapping(key, body, SLOT_KEYS, REQUIRED_SLOT)
        if body["part"] not in PARTS:
            raise self.fail("bad_part", f"{key}.part", f"{body['part']!r} is not one of {', '.join(PARTS)}")
        formula = self.expr(f"{key}.formula", body["formula"], known | {TOTAL})
        if TOTAL not in formula.names:
            raise self.fail("formula_without_total", f"{key}.formula", f"must read `{TOTAL}`, the kept elements' sum")
        when = None if body.get("when") is None else self.expr(f"{key}.when", body["when"], known)
        ops = body["ops"]
        if not isinstance(ops, Mapping) or not ops:
            raise self.fail("bad_value", f"{key}.ops", "must map at least one op or part to its elements")
        elements = []
        for op, text in ops.items():
            if op not in elements_allowed:
                raise self.fail("unknown_op", f"{key}.ops.{op}", f"unknown op or part; allowed: {', '.join(elements_allowed)}")
            elements.append((op, self.expr(f"{key}.ops.{op}", text, known)))
        return Slot(name, body["part"], formula, tuple(elements), when)

    def slots(self, value: Any, known, elements_allowed) -> tuple[Slot, ...]:
        if not isinstance(value, Mapping) or not value:
            raise self.fail("bad_value", "slots", "must map at least one slot name to its slot")
        return tuple(self.slot(name, body, known, elements_allowed) for name, body in value.items())

    def switch_sections(self, data: Mapping) -> tuple[tuple[str, ...], dict[str, OpRecord], dict[str, OpRecord]]:
        """(switches, ops, parts) of the switch sections of `data`."""
        switches = self.switches(data["switches"])
        ops = self.ops(data["ops"], switches)
        parts = self.parts(data.get("parts"), switches)
        self.claims(switches, [*ops.values(), *parts.values()])
        return switches, ops, parts

    def load(self, data: Mapping, version: str, sections: tuple) -> Records:
        """The Records of `data` (the rest of the records' content) beside its switch `sections`."""
        switches, ops, parts = sections
        derived = self.derived(data.get("names"))
        defaults = self.defaults(data.get("defaults"))
        known = set(LAYER_NAMES) | set(derived)
        full = self.expr("full", data["full"], known)
        joints = self.joints(data.get("joint"), ops, parts)
        slots = self.slots(data["slots"], known, (*OPS, *parts, *joints))
        return Records(
            version=version,
            switches=switches,
            ops=MappingProxyType(ops),
            parts=MappingProxyType(parts),
            derived=MappingProxyType(derived),
            defaults=MappingProxyType(defaults),
            tolerance=self.tolerance(data["tolerance"]),
            full=full,
            slots=slots,
            working_set=parse_working_set(self, data["working_set"], known) if "working_set" in data else None,
            joints=MappingProxyType(joints),
        )


def _canonical(value: Any) -> Any:
    """Parsed content with expressions normalised, so layout and comments never matter."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, str):
        try:
            return Expr(value).canonical()
        except ExprError:
            return value
    return value


def parse_records(data: Any, source: str = "<records>") -> Records:
    """Validate already-parsed records content, the switch sections included (e.g. a mapping
    built in a test, or `records_content()`)."""
    loader = _Loader(source)
    data = loader.mapping("", data, TOP_KEYS, REQUIRED_TOP)
    return loader.load(data, version_of(_canonical(data)), loader.switch_sections(data))


def records_content(file_data: Mapping, shared: str | Path | None = None) -> dict[str, Any]:
    """The records' whole content: the switch sections of the shared file (catalogue/shared.yaml
    by default), then `file_data` (a records file's parsed content), as parse_records takes it
    and records_version hashes it."""
    return {**switch_sections(Path(shared) if shared is not None else SHARED_PATH), **file_data}


def load_records(path: str | Path | None = None, shared: str | Path | None = None) -> Records:
    """Load and validate the records: the switch sections of the shared file (catalogue/shared.yaml
    by default) and a records file (catalogue/records/records.yaml by default), each refusal
    naming the file it is in."""
    path = Path(path) if path is not None else RECORDS_PATH
    shared_path = Path(shared) if shared is not None else SHARED_PATH
    data = read_yaml(path, lambda reason, what: RecordsError(reason, f"{path.name}: {what}"))
    loader = _Loader(path.name)
    loader.mapping("", data, FILE_KEYS, REQUIRED_FILE)
    content = records_content(data, shared_path)
    switch_loader = _Loader(shared_path.name)
    sections = switch_loader.switch_sections(switch_loader.mapping("", switch_sections(shared_path), SWITCH_SECTIONS, REQUIRED_SWITCH))
    return loader.load(content, version_of(_canonical(content)), sections)
