"""Products the layer's own code (between its children) takes with one of its other inputs:
gemma-4's per-layer input times its gate's activation, noted by the product's last dim
(LayerProbe.input_products, read by census/describe/layer_gate.py)."""

from __future__ import annotations

import torch

from speccat.census.structure.kernel_registry import storage_key


def note_input_product(watcher, probe, func, args, kwargs, out) -> None:
    """A product outside every child of the layer that reads one of the layer's other inputs."""
    read = {storage_key(a) for a in args if isinstance(a, torch.Tensor)}
    if not watcher.path and out.dim() and read & watcher.layer_inputs:  # the layer's own code, with one of its other inputs
        probe.input_products.add(int(out.shape[-1]))
