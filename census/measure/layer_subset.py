"""Running a subset of a decoder's layers: the config's per-layer lists, its layer count, its lists
of layer indices and the dicts the layers hold keyed by layer index made to match the kept
layers while they run at their positions in the cut stack, and restored after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import nn

from speccat.census.intake.checks import LAYER_INDEX_LISTS

# Per-layer config lists that transformers' decoder loops index by the layer's position.
PER_LAYER_LISTS = ("layer_types", "layer_rope_theta", "layers_block_type")


@contextlib.contextmanager
def index_lists_subset(config: Any, decoder: nn.Module, keep: list[int]) -> Iterator[None]:
    """Make the config's (and the decoder's) lists of layer indices (census/intake/checks.py
    LAYER_INDEX_LISTS: a decoder loop tests each layer's position against them, as mllama's skips
    its cross-attention layers without encoder states) name the kept layers' positions while they
    run; the decoder may hold the same list as an attribute of its own."""
    originals = []
    try:
        for key in LAYER_INDEX_LISTS:
            value = getattr(config, key, None)
            if not isinstance(value, (list, tuple)):
                continue
            positions = type(value)(i for i, index in enumerate(keep) if index in value)
            for holder in (config, decoder):
                if getattr(holder, key, None) is value:
                    originals.append((holder, key, value))
                    setattr(holder, key, positions)
        yield
    finally:
        for holder, key, value in reversed(originals):
            setattr(holder, key, value)


def index_keyed_dicts(config: Any, layers: Iterator[nn.Module], total: int) -> list[tuple[nn.Module, str, dict]]:
    """The dicts held by the kept layers' modules that are keyed by exactly the layer indices one
    of the config's lists names (zamba2's shared block maps each hybrid layer's index, from
    `hybrid_layer_ids`, to its adapter slot): (module, attribute, dict). A list of indices names
    each layer once: a per-layer list of flags (llama4's `no_rope_layers`) or of sizes
    (`mrope_section`) repeats its values and names no layers."""
    named = [
        frozenset(value) for value in getattr(config, "__dict__", {}).values()
        if isinstance(value, (list, tuple)) and value and all(type(i) is int and 0 <= i < total for i in value) and len(set(value)) == len(value)
    ]
    found = []
    for layer in layers:
        for module in layer.modules():
            for key, value in vars(module).items():  # torch's own dicts (hooks keyed by handle ids) are private
                if not key.startswith("_") and isinstance(value, dict) and value and frozenset(value) in named:
                    found.append((module, key, value))
    return found


@contextlib.contextmanager
def index_keyed_subset(config: Any, layers: dict[int, nn.Module], keep: list[int], total: int) -> Iterator[None]:
    """While the kept layers run at their positions in the cut stack, re-key each dict their
    modules hold by layer index (`index_keyed_dicts`) by those positions: a decoder hands each
    layer its position, and the layer looks itself up by it (zamba2's adapters by `layer_idx`)."""
    originals = index_keyed_dicts(config, layers.values(), total)
    try:
        for module, key, value in originals:
            setattr(module, key, {position: value[index] for position, index in enumerate(keep) if index in value})
        yield
    finally:
        for module, key, value in reversed(originals):
            setattr(module, key, value)


def count_per_layer(config: Any, stated: Any, total: int) -> int:
    """How many of what the config's layer count counts each module of the stack holds: 1, or,
    where the count is a property derived from other fields, the whole multiple it states of the
    stack's length (longcat_flash's num_hidden_layers is 2 × num_layers, the stack's length, and
    setting it sets num_layers to half: set to the probed layers' count it would run none)."""
    derived = isinstance(getattr(type(config), "num_hidden_layers", None), property)
    if derived and isinstance(stated, int) and total > 0 and stated > total and stated % total == 0:
        return stated // total
    return 1


@contextlib.contextmanager
def config_subset(config: Any, keep: list[int], total: int, probed_count: bool) -> Iterator[None]:
    """Make the config's per-layer lists match the kept layers while they run, and its layer
    count too when `probed_count` (census/build/inputs.py)."""
    originals = {}
    try:
        for key in PER_LAYER_LISTS:
            value = getattr(config, key, None)
            if isinstance(value, (list, tuple)) and len(value) == total:
                try:
                    setattr(config, key, type(value)(value[i] for i in keep))
                except AttributeError:
                    continue  # a read-only property derived from other fields
                originals[key] = value
        try:
            if probed_count:
                stated = config.num_hidden_layers
                config.num_hidden_layers = len(keep) * count_per_layer(config, stated, total)
                originals["num_hidden_layers"] = stated
        except (AttributeError, NotImplementedError):
            pass  # a config that derives its layer count from others (prophetnet); its decoder loops over the stack
        yield
    finally:
        for key, value in originals.items():
            setattr(config, key, value)

