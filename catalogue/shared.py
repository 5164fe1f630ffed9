"""What the census and the pricing both read (catalogue/shared.yaml): the sequence length the
census measures at, the settings grid's default, and the recompute switches with the ops and
parts each drops, stated once so that neither room reads the other's files.

The census reads them plainly, as it reads its own data; the pricing reads them as part of its
own files' content and validates them there: the records' loader the switch sections
(catalogue/records/oprecords.py), the settings' loader the sequence length
(catalogue/records/settings.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from speccat.catalogue.datafile import read_yaml

SHARED_PATH = Path(__file__).with_name("shared.yaml")
# The sections that state the switches, in the order the records' content begins with them.
SWITCH_SECTIONS: tuple[str, ...] = ("switches", "ops", "parts")


@cache
def shared_content(path: Path = SHARED_PATH) -> Mapping[str, Any]:
    """The file's parsed content (`fail`-less: an unreadable file or bad YAML raises as read_yaml does)."""
    return MappingProxyType(read_yaml(path))


def default_seq_length() -> int:
    """The sequence length the census measures at and the settings grid's default."""
    return shared_content()["seq_length"]


def switch_sections(path: Path = SHARED_PATH) -> dict[str, Any]:
    """The switch sections as the file states them, in SWITCH_SECTIONS order: the start of the
    records' content (records_version hashes them first)."""
    content = shared_content(path)
    return {key: content[key] for key in SWITCH_SECTIONS if key in content}


@cache
def switches() -> tuple[str, ...]:
    """The recompute switches in mask-bit order."""
    return tuple(shared_content()["switches"])


@cache
def switch_drops() -> Mapping[str, frozenset[str]]:
    """Switch -> the ops and parts whose saves it drops (an op with no switch: none drops it
    but full recompute)."""
    content = shared_content()
    drops: dict[str, set[str]] = {switch: set() for switch in switches()}
    for section in ("ops", "parts"):
        for name, record in (content.get(section) or {}).items():
            if record["switch"] is not None:
                drops[record["switch"]].add(name)
    return MappingProxyType({switch: frozenset(names) for switch, names in drops.items()})


def longest_prefix(model_type: str, prefixes: Mapping[str, Iterable[str]]) -> str | None:
    """The key of `prefixes` (name → the model_type prefixes it matches) whose prefix is the
    longest prefix of `model_type`, or None when none is: the rule by which a model_type finds
    its family profile, read by the census (census/structure/family.py) and by the pricing's
    widths (catalogue/records/family_widths.py), so both pick the same family."""
    best, best_len = None, 0
    for name, names_prefixes in prefixes.items():
        for prefix in names_prefixes:
            if model_type.startswith(prefix) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    return best
