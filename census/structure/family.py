"""Family profiles (census/structure/profiles/*.yaml): the layer kinds a family declares (docs/census.md,
"Op counts").

A profile names a family, the model_type prefixes it claims (`match`, its own name by
default), its kinds (op counts plus the mixer's and the ffn's flavours: keys `attention` and
`ffn`), an optional `default` kind, byte-width `defaults` (merged over the default family's)
and `model` defaults. A model's family is the one whose prefix is the longest prefix of its
model_type; otherwise `default`.
The loader refuses unknown keys, missing or unknown ops, unknown flavours and a default that
is not a kind, naming the file and the key.

The census reads the kinds. Of the `defaults`, costs.yaml reads softmax_bytes and
dropout_bytes, which the pricing reads from these files itself by the same rule
(catalogue/records/family_widths.py); nothing reads norm_bytes, nor `model` (the census states
an MLA kind's v_head_dim): they stay, validated here, until the profiles next change.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from speccat.catalogue.datafile import parse_yaml
from speccat.catalogue.errors import ReasonError
from speccat.catalogue.shared import longest_prefix
from speccat.catalogue.vocabulary import OPS
from speccat.census.spec import MIXER_FLAVOURS, FFN_FLAVOURS, OPTIONAL_INT

log = logging.getLogger(__name__)

PROFILES_DIR = Path(__file__).with_name("profiles")
DEFAULT_FAMILY = "default"

PROFILE_KEYS = frozenset({"family", "match", "default", "kinds", "defaults", "model"})
KIND_KEYS = frozenset({"attention", "ffn", "ops"})
# The profile's `defaults` (bytes a norm, a dropout mask and the softmax statistics keep per element).
DEFAULTS_KEYS: tuple[str, ...] = ("norm_bytes", "dropout_bytes", "softmax_bytes")


class ProfileError(ReasonError):
    """A profile file that is not well formed: reason `bad_profile` (the vocabulary's `profile`
    group), the message naming the file and the key, so the CLI prints it as one line."""

    group = "profile"


@dataclass(frozen=True)
class Kind:
    name: str
    mixer: str  # its mixer flavour (the profile's `attention` key): "full", "linear", ...
    ffn: str | None  # "dense", "moe", or None when the family's layers do not differ in it
    ops: Mapping[str, int]

    def accepts(self, mixer: str, ffn: str) -> bool:
        """Whether a layer with these flavours belongs to this kind."""
        return self.mixer == mixer and (self.ffn is None or self.ffn == ffn)


@dataclass(frozen=True)
class Family:
    name: str
    match: tuple[str, ...]
    kinds: Mapping[str, Kind]
    default: str | None
    defaults: Mapping[str, int]
    model: Mapping[str, int]

    def kind_for(self, mixer: str, ffn: str) -> str | None:
        """The name of the one kind whose flavours match, or None when no kind does.

        When several kinds match, the declared `default` wins if it is among them; otherwise
        the first declared. Families are written so that this is unambiguous.
        """
        matching = [k.name for k in self.kinds.values() if k.accepts(mixer, ffn)]
        if not matching:
            return None
        if self.default in matching:
            return self.default
        return matching[0]


def _fail(path: Path, key: str, what: str) -> ProfileError:
    return ProfileError("bad_profile", f"{path.name}: {key}: {what}")


def _check_keys(path: Path, where: str, mapping: Any, allowed) -> Mapping:
    if not isinstance(mapping, Mapping):
        raise _fail(path, where, f"must be a mapping, got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise _fail(path, f"{where}.{unknown[0]}" if where else unknown[0], f"unknown key; allowed: {sorted(allowed)}")
    return mapping


def _parse_ops(path: Path, where: str, ops: Any) -> Mapping[str, int]:
    _check_keys(path, where, ops, OPS)
    for op in OPS:
        if op not in ops:
            raise _fail(path, f"{where}.{op}", f"missing op count; every kind needs all of {list(OPS)}")
        value = ops[op]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _fail(path, f"{where}.{op}", f"must be a non-negative integer, got {value!r}")
    return MappingProxyType({op: ops[op] for op in OPS})


def _parse_kind(path: Path, name: Any, body: Any) -> Kind:
    where = f"kinds.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise _fail(path, where, "kind names must be identifiers")
    _check_keys(path, where, body, KIND_KEYS)
    mixer = body.get("attention", "full")
    if mixer not in MIXER_FLAVOURS:
        raise _fail(path, f"{where}.attention", f"{mixer!r} is not one of {list(MIXER_FLAVOURS)}")
    ffn = body.get("ffn")
    if ffn is not None and ffn not in FFN_FLAVOURS:
        raise _fail(path, f"{where}.ffn", f"{ffn!r} is not one of {list(FFN_FLAVOURS)} (or absent)")
    if "ops" not in body:
        raise _fail(path, f"{where}.ops", "missing; every kind states its op counts")
    return Kind(name, mixer, ffn, _parse_ops(path, f"{where}.ops", body["ops"]))


def _parse_defaults(path: Path, defaults: Any, base: Mapping[str, int] | None) -> Mapping[str, int]:
    _check_keys(path, "defaults", defaults, DEFAULTS_KEYS)
    merged = dict(base or {})
    merged.update(defaults)
    for key in DEFAULTS_KEYS:
        if key not in merged:
            raise _fail(path, f"defaults.{key}", "missing (the default family must state every default)")
        value = merged[key]
        if type(value) is not int or value < 0:
            raise _fail(path, f"defaults.{key}", f"must be a non-negative integer, got {value!r}")
    return MappingProxyType(merged)


def _parse_model(path: Path, model: Any) -> Mapping[str, int]:
    _check_keys(path, "model", model, OPTIONAL_INT)
    for key, value in model.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise _fail(path, f"model.{key}", f"must be a positive integer, got {value!r}")
    return MappingProxyType(dict(model))


def parse_profile(path: Path, data: Any, base_defaults: Mapping[str, int] | None) -> Family:
    """Validate one profile's parsed YAML into a Family."""
    _check_keys(path, "", data, PROFILE_KEYS)
    name = data.get("family")
    if not isinstance(name, str) or not name.isidentifier():
        raise _fail(path, "family", f"must name the family as an identifier, got {name!r}")
    match = data.get("match", [name])
    if not isinstance(match, list) or not match or not all(isinstance(m, str) and m for m in match):
        raise _fail(path, "match", "must be a non-empty list of model_type prefixes")
    kinds_raw = data.get("kinds")
    if not isinstance(kinds_raw, Mapping) or not kinds_raw:
        raise _fail(path, "kinds", "must declare at least one kind")
    kinds = {str(n): _parse_kind(path, n, body) for n, body in kinds_raw.items()}
    default = data.get("default")
    if default is not None and default not in kinds:
        raise _fail(path, "default", f"{default!r} is not a kind; kinds are {sorted(kinds)}")
    defaults = _parse_defaults(path, data.get("defaults", {}), base_defaults)
    model = _parse_model(path, data.get("model", {}))
    return Family(name, tuple(match), MappingProxyType(kinds), default, defaults, model)


def _read_yaml(path: Path) -> Any:
    """A profile parsed; bad YAML is a ProfileError naming the file."""
    return parse_yaml(path.read_text(), lambda _reason, what: ProfileError("bad_profile", f"{path.name}: {what}"))


def load_families(directory: Path = PROFILES_DIR) -> dict[str, Family]:
    """Every profile in `directory`, by family name. The default family must be present."""
    paths = sorted(directory.glob("*.yaml"))
    raw = {p: _read_yaml(p) for p in paths}
    default_path = next((p for p, d in raw.items() if isinstance(d, Mapping) and d.get("family") == DEFAULT_FAMILY), None)
    if default_path is None:
        raise ProfileError("bad_profile", f"{directory}: no profile declares family {DEFAULT_FAMILY!r}")
    base = parse_profile(default_path, raw[default_path], None)
    families = {DEFAULT_FAMILY: base}
    claimed: dict[str, str] = {}
    for path, data in raw.items():
        if path == default_path:
            continue
        family = parse_profile(path, data, base.defaults)
        if family.name in families:
            raise _fail(path, "family", f"{family.name!r} is declared twice")
        for prefix in family.match:
            if prefix in claimed:
                raise _fail(path, "match", f"prefix {prefix!r} is already claimed by family {claimed[prefix]!r}")
            claimed[prefix] = family.name
        families[family.name] = family
    return families


def profiles_version(directory: Path = PROFILES_DIR) -> str:
    """A short hash of the profiles' canonical content (parsed YAML, sorted keys)."""
    canonical = {p.name: _read_yaml(p) for p in sorted(directory.glob("*.yaml"))}
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@lru_cache(maxsize=None)
def _families() -> dict[str, Family]:
    return load_families()


_logged_fallbacks: set[str] = set()


def family_for(model_type: str, families: Mapping[str, Family] | None = None) -> Family:
    """The family whose `match` prefix is the longest prefix of `model_type`, else default.

    The name only picks the family's kinds and defaults; dimensions and counts always
    come from the built modules.
    """
    families = families if families is not None else _families()
    name = longest_prefix(model_type, {family.name: family.match for family in families.values()})
    if name is None and model_type not in _logged_fallbacks:
        _logged_fallbacks.add(model_type)
        log.info("model_type %r matches no family prefix; using the default family", model_type)
    return families[name if name is not None else DEFAULT_FAMILY]
