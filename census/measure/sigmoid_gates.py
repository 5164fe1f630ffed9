"""Sigmoid gates written inline (RWKV's receptance): a sigmoid of the output the last projection
returned, outside any activation module, and the products of that sigmoid's output, noted per
projection (LayerProbe.sigmoid_gates)."""

from __future__ import annotations

from typing import Any

import torch

from speccat.census.kernels.scope import current_kernel
from speccat.census.structure.kernel_registry import storage_key
from speccat.census.structure.predicates import is_activation_region

SIGMOID_OP = torch.ops.aten.sigmoid.default


def sigmoid_of_projection(watcher, x: Any) -> bool:
    """An inline sigmoid (outside any activation module) of the output the last projection returned."""
    return (
        watcher.last_projection is not None
        and isinstance(x, torch.Tensor)
        and storage_key(x) == watcher.last_projection[1]
        and not any(is_activation_region(m) for _, m in watcher.path)
    )


def note_sigmoid(watcher, probe, func, args, kwargs, out) -> None:
    """A sigmoid of a projection's output, outside any kernel: a gate of that projection, its
    output noted (watcher.gate_outputs) so its products are seen."""
    if current_kernel() is None and sigmoid_of_projection(watcher, args[0]):
        path = watcher.last_projection[0]
        probe.sigmoid_gates.setdefault(path, set())
        watcher.gate_outputs[storage_key(out)] = path
        watcher.kept.append(out.untyped_storage())


def note_gated_product(watcher, probe, func, args, kwargs, out) -> None:
    """A product that reads a gate's output: the product's storage noted under the gate's projection."""
    read = {storage_key(a) for a in args if isinstance(a, torch.Tensor)}
    for key in read & watcher.gate_outputs.keys():
        probe.sigmoid_gates[watcher.gate_outputs[key]].add(storage_key(out))
