"""The census's pre-build bounds (census/intake/limits.yaml), loaded once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from speccat.catalogue.datafile import read_yaml

LIMITS_PATH = Path(__file__).with_name("limits.yaml")
KEYS = ("max_config_bytes", "max_config_depth", "census_memory_mib", "required", "stack_length", "sizes", "per_layer_sizes", "unbounded", "finite")


@dataclass(frozen=True)
class Limits:
    max_config_bytes: int
    max_config_depth: int  # JSON nesting levels of a config
    census_memory_mib: int  # address space a census child may add (flows/isolate.py)
    required: tuple[str, ...]
    stack_length: str  # the required field a stated field equal to the built stack's length may stand for
    sizes: Mapping[str, tuple[int, int]]  # field -> (min, max)
    per_layer_sizes: frozenset[str]  # sizes a config may state as a list, one per layer
    unbounded: Mapping[str, int]  # field -> the value that means "no bound" (not a size)
    finite: frozenset[str]  # fields that must be finite numbers (never Infinity)


def load_limits(path: Path = LIMITS_PATH) -> Limits:
    data = read_yaml(path)
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ValueError(f"{path.name}: unknown key(s) {unknown}")
    sizes = {}
    for field, bounds in data["sizes"].items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int) for b in bounds) and bounds[0] <= bounds[1]):
            raise ValueError(f"{path.name}: sizes.{field}: must be [min, max] integers with min <= max, got {bounds!r}")
        sizes[field] = (bounds[0], bounds[1])
    if data["stack_length"] not in data["required"]:
        raise ValueError(f"{path.name}: stack_length: must name a required field, got {data['stack_length']!r}")
    unbounded = sorted(set(data["per_layer_sizes"]) - set(sizes))
    if unbounded:
        raise ValueError(f"{path.name}: per_layer_sizes: {unbounded} have no bounds in sizes")
    unknown_bounds = sorted(set(data["unbounded"]) - set(sizes))
    if unknown_bounds or not all(isinstance(v, int) for v in data["unbounded"].values()):
        raise ValueError(f"{path.name}: unbounded: must map fields of sizes to an integer, got {data['unbounded']!r}")
    for key in ("max_config_bytes", "max_config_depth", "census_memory_mib"):
        if not (isinstance(data.get(key), int) and data[key] > 0):
            raise ValueError(f"{path.name}: {key}: must be a positive integer, got {data.get(key)!r}")
    return Limits(
        data["max_config_bytes"], data["max_config_depth"], data["census_memory_mib"], tuple(data["required"]), data["stack_length"], MappingProxyType(sizes),
        frozenset(data["per_layer_sizes"]), MappingProxyType(dict(data["unbounded"])), frozenset(data["finite"]),
    )


LIMITS = load_limits()
