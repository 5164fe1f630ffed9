"""What links the routed experts to the projections around them (docs/census.md, "A latent
MoE"): the width of the input the experts were called with, the projections whose output they
were called with, and the projections called with what they returned. A latent MoE (Nemotron-3-
Super's `fc1_latent_proj` and `fc2_latent_proj`) runs its routed experts in a narrower width
between a projection down from the hidden size and one back up to it; the describe stage reads
these links with the projections' weights (census/describe/feed_forward_facts.py
`latent_projections`), so the latent width is told by what ran, not by a module's name.

The watcher (census/measure/watcher.py) calls these from its module hooks. Storages are matched
by identity; each one noted is held until the layer's forward ends, so its identity stays its own.
"""

from __future__ import annotations

from typing import Any

import torch

from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.structure.kernel_registry import storage_key


class ExpertLinks:
    """The projections' and the routed experts' outputs of the layer running now, by storage."""

    def __init__(self):
        self.projection_outputs: dict[int, tuple[str, Any]] = {}  # storage -> (the projection that returned it, the storage, held)
        self.experts_outputs: dict[int, Any] = {}  # storage the routed experts returned -> the storage, held

    def clear(self) -> None:
        """A new layer's forward begins: nothing of the last one's links to it."""
        self.projection_outputs.clear()
        self.experts_outputs.clear()

    def projection_returned(self, name: str, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            self.projection_outputs[storage_key(output)] = (name, output.untyped_storage())

    def experts_returned(self, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            self.experts_outputs[storage_key(output)] = output.untyped_storage()

    def experts_called(self, probe: LayerProbe, name: str, x: Any) -> None:
        """The routed experts at `name` were called with `x` (their tokens' hidden states): its
        width, and the projection that made it, if one did."""
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return
        probe.experts_input_widths.setdefault(name, int(x.shape[-1]))
        made = self.projection_outputs.get(storage_key(x))
        if made is not None:
            probe.experts_fed_by.add(made[0])

    def projection_called(self, probe: LayerProbe, name: str, x: Any) -> None:
        """A projection was called with `x`: noted when the routed experts returned it."""
        if isinstance(x, torch.Tensor) and storage_key(x) in self.experts_outputs:
            probe.experts_read_by.add(name)
