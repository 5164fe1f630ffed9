"""The two byte widths costs.yaml reads that no spec states: a model family's softmax
statistics and dropout masks (`bytes_softmax`, `bytes_dropout`), read from its family profile.

They are the profile's `defaults` (census/structure/profiles/*.yaml: softmax_bytes,
dropout_bytes; a family states only those it changes from the default family's). The records
(records.yaml) read neither, and the spec names its model_type (`arch`) but not its family, so
this is the one place pricing reads beyond the spec: the profile files themselves, found from
the spec's `arch` by the census's own rule (catalogue/shared.py `longest_prefix`, which
census/structure/family.py's `family_for` uses too: the profile whose `match` prefix, its family
name when it lists none, is the longest prefix of the model_type, else the default family). Pricing reads the files, never the census's code, so its
imports stay in its room; the census's loader is what validates them. The widths move into the
pricing's own data when costs.yaml next changes (a new records_version): reading them there
now would change the version every stored price is keyed by.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType

from speccat.catalogue.datafile import read_yaml
from speccat.catalogue.shared import longest_prefix

# The census's profiles, beside this room in the installed package (speccat/census/...).
PROFILES_DIR = Path(__file__).resolve().parents[2] / "census" / "structure" / "profiles"
DEFAULT_FAMILY = "default"  # the family every model_type falls back to, whose widths the others change
# The names a layer reads -> the profile's `defaults` key each is.
WIDTH_NAMES: Mapping[str, str] = MappingProxyType({"bytes_softmax": "softmax_bytes", "bytes_dropout": "dropout_bytes"})


@cache
def _profiles(directory: Path = PROFILES_DIR) -> tuple[Mapping, ...]:
    return tuple(read_yaml(path) for path in sorted(directory.glob("*.yaml")))


@cache
def family_widths(model_type: str) -> Mapping[str, int]:
    """`bytes_softmax` and `bytes_dropout` of the family profile `model_type` belongs to."""
    profiles = {profile["family"]: profile for profile in _profiles()}
    name = longest_prefix(model_type, {family: profile.get("match", [family]) for family, profile in profiles.items()})
    default, best = profiles[DEFAULT_FAMILY], profiles[name if name is not None else DEFAULT_FAMILY]
    widths = {**default["defaults"], **best.get("defaults", {})}
    return MappingProxyType({name: widths[key] for name, key in WIDTH_NAMES.items()})
