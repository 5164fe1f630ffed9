"""The census measures a training run (census/intake/training.yaml): config fields that choose a
generation path are set to their training value before the model is built, and a config that
names a kernel the census does not model is refused before anything is built.

Plain Python (no torch): the kernel check is one of census/intake/checks.py's raw checks, which the
CLI runs before importing torch.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from speccat.catalogue.datafile import read_yaml
from speccat.census.spec import SpecError

TRAINING_PATH = Path(__file__).with_name("training.yaml")


@dataclass(frozen=True)
class Training:
    set: Mapping[str, Mapping[Any, Any]]  # field -> {generation value: training value}
    kernels: Mapping[str, frozenset]  # field -> the values naming a kernel the census measures


def load_training(path: Path = TRAINING_PATH) -> Training:
    data = read_yaml(path)
    unknown = sorted(set(data) - {"set", "kernels"})
    if unknown:
        raise ValueError(f"{path.name}: unknown key(s) {unknown}")
    for field, swap in data["set"].items():
        if not isinstance(swap, dict) or not swap:
            raise ValueError(f"{path.name}: set.{field}: must map a generation value to the training value, got {swap!r}")
    for field, values in data["kernels"].items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path.name}: kernels.{field}: must list the values the census measures, got {values!r}")
    return Training(
        MappingProxyType({f: MappingProxyType(dict(s)) for f, s in data["set"].items()}),
        MappingProxyType({f: frozenset(v) for f, v in data["kernels"].items()}),
    )


TRAINING = load_training()


def check_kernels(language: Mapping) -> None:
    """A kernel field the config states with a value the census does not measure: unsupported_layer."""
    for field, measured in TRAINING.kernels.items():
        value = language.get(field)
        if value is not None and value not in measured:
            raise SpecError(
                "unsupported_layer",
                f"{field}: {value!r} names a kernel the census does not model (it measures {', '.join(sorted(map(str, measured)))}: "
                "census/intake/training.yaml)",
            )


def set_training(cfg: Any) -> None:
    """Set, on a transformers config object, each field that chooses generation to its training value."""
    for field, swap in TRAINING.set.items():
        value = getattr(cfg, field, None)
        if isinstance(value, Hashable) and value in swap:
            setattr(cfg, field, swap[value])
