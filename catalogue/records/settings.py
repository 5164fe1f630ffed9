"""The settings grid (catalogue/records/settings.yaml, docs/pricing.md): loader, expansion, setting ids.

`load_settings()` returns a `Grid`: every combination of the fields' values, in field order,
each a read-only mapping with a stable `setting_id` (a hash of its canonical mapping: field
values normalised by type, keys sorted) and every field. The file lists seq_length's values after
its default, which is catalogue/shared.yaml's (the census's sequence length): the grid's content
is the file's with that default first (`settings_content`). `Grid.setting(overrides)` builds one
setting from the fields' defaults (each field's first value) and overrides, refusing an
unknown field or a bad value; `Grid.with_settings` makes a grid of chosen settings (what the
CLI prices). The grid's `version` hashes that content, like records_version.

Beside the grid, two sections list settings a night stores too: `curve` (the memory curve,
priced op by op) and `overload` (routing skew: the grid again at each listed dropless_tok_factor,
priced for specs with routed experts only, `Grid.priced_at(spec)`). The overload's values are
refused where the grid lists them already, so an overload setting is never a grid setting.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field as dataclass_field, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from speccat.catalogue.datafile import Loader, read_yaml, version_of
from speccat.catalogue.errors import ReasonError
from speccat.catalogue.shared import default_seq_length

SETTINGS_PATH = Path(__file__).with_name("settings.yaml")

# The fields pricing reads (catalogue/records/names.py); the file must define exactly these.
FIELDS = (
    "stack", "seq_length", "micro_batch", "tp", "cp", "sequence_parallel", "flash_attention", "cp_algo",
    "dtype", "in_flight", "param_casts", "grouped_gemm", "dropless_tok_factor", "capacity_factor",
)  # fmt: skip
# Settings of one value for the whole grid (the file's `fixed`), outside its combinations: no
# column of the catalogue's settings table, and part of a setting's id only at another value.
FIXED = ("encoder_tokens", "attention_kernel")
TYPES = ("int", "number", "bool", "choice", "dtype")
FIELD_KEYS = ("type", "min", "choices", "values")


class SettingsError(ReasonError):
    """A settings file, or a setting built from overrides, refused."""

    group = "settings"


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    min: int | None
    choices: tuple[str, ...]
    values: tuple[Any, ...]

    def check(self, value: Any, where: str) -> Any:
        """`value` normalised to the field's type, or SettingsError naming `where`."""
        def bad(what: str) -> SettingsError:
            return SettingsError("bad_value", f"{where}: {what}, got {value!r}")

        if self.type == "bool":
            if not isinstance(value, bool):
                raise bad("must be true or false")
            return value
        if self.type in ("choice", "dtype"):
            if value not in self.choices:
                raise bad(f"must be one of {', '.join(self.choices)}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("must be a number")
        if self.type == "int":
            if not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
                raise bad("must be an integer")
            value = int(value)
            if value < (1 if self.min is None else self.min):
                raise bad(f"must be >= {1 if self.min is None else self.min}")
            return value
        value = float(value)
        above = value > 0 if self.min is None else value >= self.min
        if not (math.isfinite(value) and above):
            raise bad("must be a finite number > 0" if self.min is None else f"must be finite and >= {self.min}")
        return value

    @property
    def default(self) -> Any:
        return self.values[0]


def routed_experts(spec: Mapping[str, Any]) -> bool:
    """Whether `spec` has routed experts: more than one expert (`num_experts`), the test
    `speccat fit --moe-overload` makes and sql/steps/stored.sql makes of the specs table's
    num_experts. Such a spec is priced at the overload settings too (`Grid.priced_at`)."""
    return (spec.get("num_experts") or 1) > 1


def setting_id(fields: Mapping[str, Any]) -> str:
    """The stable id of a setting: a hash of its field mapping, keys sorted."""
    blob = json.dumps({k: fields[k] for k in sorted(fields)}, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _freeze(fields: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType({"setting_id": setting_id(fields), **fields})


@dataclass(frozen=True)
class Grid:
    """The expanded grid. `fields` orders the settings table's columns after `setting_id`."""

    version: str
    fields: tuple[str, ...]
    settings: tuple[Mapping[str, Any], ...]
    dtype_bytes: Mapping[str, int]
    schema: Mapping[str, Field]  # each field's type, bounds and values
    fixed: Mapping[str, Field] = dataclass_field(default_factory=lambda: MappingProxyType({}))  # the fixed settings: one value each
    curve: tuple[Mapping[str, Any], ...] = ()  # the settings the memory curve is priced at (the file's `curve`)
    overload: tuple[Mapping[str, Any], ...] = ()  # the grid at the file's `overload` values: specs with routed experts only

    def setting(self, overrides: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
        """One setting: each field's default, with `overrides` (validated) on top. A fixed
        setting (`encoder_tokens`) may be overridden too: at another value than the grid's it is
        part of the setting (and its id), at the grid's it is left out, as in every grid row."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.fields) - set(self.fixed))
        if unknown:
            raise SettingsError("unknown_field", f"unknown setting field(s) {unknown}; fields: {', '.join((*self.fields, *self.fixed))}")
        values = {}
        for name in self.fields:
            field = self.schema[name]
            values[name] = field.check(overrides[name], f"setting {name}") if name in overrides else field.default
        for name, field in self.fixed.items():
            if name in overrides and (value := field.check(overrides[name], f"setting {name}")) != field.default:
                values[name] = value
        return _freeze(values)

    @property
    def stored(self) -> tuple[Mapping[str, Any], ...]:
        """Every setting the catalogue holds prices at: the grid's, the overload's, then the
        curve's the two lack."""
        ids = {s["setting_id"] for s in self.settings + self.overload}
        return self.settings + self.overload + tuple(s for s in self.curve if s["setting_id"] not in ids)

    def priced_at(self, spec: Mapping[str, Any]) -> Grid:
        """The grid `spec` is priced at: this grid's settings, then the overload's when the spec
        has routed experts (`routed_experts`); the overload's factor changes nothing of a dense
        spec's price, so a dense spec is priced at the grid's alone."""
        return self.with_settings(self.settings + self.overload) if self.overload and routed_experts(spec) else self

    def with_settings(self, settings: Iterable[Mapping[str, Any]]) -> Grid:
        """A grid holding just `settings` (each as built by `setting`)."""
        return replace(self, settings=tuple(settings))


class _Loader(Loader):
    """Validation of one parsed settings file."""

    error = SettingsError

    def dtypes(self, value: Any) -> dict[str, int]:
        if not isinstance(value, Mapping) or not value:
            raise self.fail("bad_value", "dtypes", "must map each dtype name to its bytes per element")
        for name, size in value.items():
            if not isinstance(name, str) or isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise self.fail("bad_value", f"dtypes.{name}", f"must be a positive integer byte width, got {size!r}")
        return dict(value)

    def field(self, name: str, body: Any, dtypes: Mapping[str, int]) -> Field:
        key = f"fields.{name}"
        body = self.mapping(key, body, FIELD_KEYS, ("type", "values"))
        kind = body["type"]
        if kind not in TYPES:
            raise self.fail("bad_value", f"{key}.type", f"{kind!r} is not one of {', '.join(TYPES)}")
        minimum = body.get("min")
        if minimum is not None and (kind not in ("int", "number") or isinstance(minimum, bool) or not isinstance(minimum, (int, float))):
            raise self.fail("bad_value", f"{key}.min", "only int and number fields take a numeric min")
        choices = body.get("choices")
        if kind == "choice":
            if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
                raise self.fail("bad_value", f"{key}.choices", "a choice field lists its choices as text")
        elif choices is not None:
            raise self.fail("bad_value", f"{key}.choices", "only choice fields take choices")
        choices = tuple(dtypes) if kind == "dtype" else tuple(choices or ())
        values = body["values"]
        if not isinstance(values, list) or not values:
            raise self.fail("bad_value", f"{key}.values", "must be a non-empty list")
        field = Field(name, kind, minimum, choices, ())
        checked = tuple(field.check(v, f"{self.source}: {key}.values[{i}]") for i, v in enumerate(values))
        if len(set(checked)) != len(checked):
            raise self.fail("bad_value", f"{key}.values", f"lists a value twice: {values}")
        return replace(field, values=checked)

    def load(self, data: Any) -> Grid:
        data = self.mapping("", data, ("dtypes", "fields", "fixed", "curve", "overload"), ("dtypes", "fields"))
        dtypes = self.dtypes(data["dtypes"])
        raw = self.mapping("fields", data["fields"], FIELDS, FIELDS, what="field", unknown="unknown_field")
        fields = {name: self.field(name, body, dtypes) for name, body in raw.items()}
        raw_fixed = self.mapping("fixed", data.get("fixed", {}), FIXED, what="field", unknown="unknown_field")
        fixed = {name: self.field(name, body, dtypes) for name, body in raw_fixed.items()}
        for name, field in fixed.items():
            if len(field.values) != 1:
                raise self.fail("bad_value", f"fixed.{name}.values", "a fixed setting has one value")
        names = tuple(fields)
        settings = tuple(
            _freeze(dict(zip(names, combo))) for combo in itertools.product(*(f.values for f in fields.values()))
        )
        curve = self.curve(data.get("curve", {}), fields)
        overload = self.overload(data.get("overload", {}), fields, settings)
        return Grid(version_of(data), names, settings, MappingProxyType(dtypes), MappingProxyType(fields), MappingProxyType(fixed),
                    curve, overload)  # fmt: skip

    def curve(self, data: Any, fields: Mapping[str, Field]) -> tuple[Mapping[str, Any], ...]:
        """Every combination of the values `curve` lists (each checked as its field's), every other
        field at its default, in the grid's field order."""
        raw = self.mapping("curve", data, tuple(fields), what="field", unknown="unknown_field")
        listed = {}
        for name, values in raw.items():
            if not isinstance(values, list) or not values:
                raise self.fail("bad_value", f"curve.{name}", "must be a non-empty list")
            listed[name] = tuple(fields[name].check(v, f"{self.source}: curve.{name}[{i}]") for i, v in enumerate(values))
        axes = [listed.get(name, (field.default,)) for name, field in fields.items()]
        return tuple(_freeze(dict(zip(fields, combo))) for combo in itertools.product(*axes)) if listed else ()

    def overload(self, data: Any, fields: Mapping[str, Field], grid: tuple[Mapping[str, Any], ...]) -> tuple[Mapping[str, Any], ...]:
        """Every grid setting with the fields `overload` lists at each combination of their
        values (each checked as its field's, none the grid's own), the values' combinations in
        the order listed, the grid's settings in its order under each."""
        raw = self.mapping("overload", data, tuple(fields), what="field", unknown="unknown_field")
        listed = {}
        for name, values in raw.items():
            if not isinstance(values, list) or not values:
                raise self.fail("bad_value", f"overload.{name}", "must be a non-empty list")
            checked = tuple(fields[name].check(v, f"{self.source}: overload.{name}[{i}]") for i, v in enumerate(values))
            if len(set(checked)) != len(checked):
                raise self.fail("bad_value", f"overload.{name}", f"lists a value twice: {values}")
            if shared := [v for v in checked if v in fields[name].values]:
                raise self.fail("bad_value", f"overload.{name}", f"{shared} the grid prices already (fields.{name}.values)")
            listed[name] = checked
        return tuple(
            _freeze({**{k: v for k, v in setting.items() if k != "setting_id"}, **dict(zip(listed, combo))})
            for combo in itertools.product(*listed.values())
            for setting in grid
        ) if listed else ()  # fmt: skip


def parse_settings(data: Any, source: str = "<settings>") -> Grid:
    """Validate already-parsed settings content."""
    return _Loader(source).load(data)


@cache
def _shipped() -> Grid:
    """The shipped grid, parsed once for the defaults below (each parse takes about 25 ms)."""
    return load_settings()


@cache
def default_setting() -> Mapping[str, Any]:
    """The shipped grid's default setting (each field at its first value): what a command, a
    query or a census uses for a field nobody chose."""
    return _shipped().setting({})


@cache
def fixed_default(name: str) -> Any:
    """The shipped grid's value of a fixed setting: what a setting that does not state it stands for."""
    return _shipped().fixed[name].default


def settings_content(data: Any) -> Any:
    """A settings file's parsed content with catalogue/shared.yaml's sequence length first among
    seq_length's values: the grid's content, as parse_settings takes it and its version hashes
    it. Content without a list of seq_length values is left as it is, for the loader to refuse."""
    fields = data.get("fields") if isinstance(data, Mapping) else None
    seq = fields.get("seq_length") if isinstance(fields, Mapping) else None
    if not isinstance(seq, Mapping) or not isinstance(seq.get("values"), list):
        return data
    return {**data, "fields": {**fields, "seq_length": {**seq, "values": [default_seq_length(), *seq["values"]]}}}


def load_settings(path: str | Path | None = None) -> Grid:
    """Load and expand a settings grid file (catalogue/records/settings.yaml by default)."""
    path = Path(path) if path is not None else SETTINGS_PATH
    data = read_yaml(path, lambda reason, what: SettingsError(reason, f"{path.name}: {what}"))
    return parse_settings(settings_content(data), path.name)
