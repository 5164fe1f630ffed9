"""Op counts the census cannot observe on one device (census/describe/counts.yaml), loaded once."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from speccat.catalogue.datafile import read_yaml
from speccat.catalogue.vocabulary import OPS

COUNTS_PATH = Path(__file__).with_name("counts.yaml")


def load_fixed_counts(path: Path = COUNTS_PATH) -> Mapping[str, int]:
    """Op counts every kind states as given (the census cannot observe them on one device)."""
    data = read_yaml(path)
    for op, count in data.items():
        if op not in OPS or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"{path.name}: {op}: must be an op of {list(OPS)} with a non-negative integer count, got {count!r}")
    return MappingProxyType(dict(data))


FIXED_COUNTS = load_fixed_counts()
