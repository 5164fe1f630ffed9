"""Norms a child runs on what its attention kernel or its MLP's activation made, before the
child's next projection reads it (docs/census.md, "Norms inside the attention and the MLP"):
bitnet's `attn_sub_norm` between the attention kernel and o_proj, and its `ffn_sub_norm`
between the MLP's product and down_proj.

Such a norm normalises the child's own width (the heads' outputs, the MLP's), inside the
tensor-parallel region, not the layer's hidden stream. After the attention kernel that holds
even where the heads' width equals the hidden size (bitnet's heads are 2560 wide, as its hidden
states); after an MLP's activation a norm of the hidden width is taken for a norm on the block's
output, a stream norm (axk1's post_mlp_layernorm after its experts and shared MLP), so an MLP
norm is told apart only where the MLP's width differs from the hidden size. The watcher
(census/measure/watcher.py) notes each call here by what it follows, and counts none of them
among the stream norms.
The variant facts `attn_out_norm` and `ff_down_norm` are read from what is noted.
"""

from __future__ import annotations

import torch

AFTER_ATTENTION = "attention"  # the child's softmax attention kernel ran, and no projection since
AFTER_ACTIVATION = "activation"  # an activation ran in a child that runs no kernel (an MLP)


class InnerNorms:
    """Per child of the layer running now, what ran in it that a norm called next follows: its
    attention kernel, until the child's next projection (the output projection, which reads
    what such a norm returns); or, in a child that runs no kernel, an MLP's activation, whatever
    projections follow (the up projection may run after the activation: bitnet's
    act_fn(gate_proj(x)) * up_proj(x)), the facts' readers checking that the MLP's own
    projection reads the norm's output."""

    def __init__(self) -> None:
        self.awaiting: dict[str | None, str] = {}  # child -> AFTER_ATTENTION or AFTER_ACTIVATION

    def clear(self) -> None:
        """A new layer begins."""
        self.awaiting.clear()

    def kernel_ran(self, child: str | None, kind: str) -> None:
        """A kernel whose following projections are output projections ran in `child`: after a
        softmax attention's, a norm before the output projection is the attention's; after
        another mixer's (a scan, a delta rule), none noted here (their gated norms have facts of
        their own)."""
        if kind == AFTER_ATTENTION:
            self.awaiting[child] = AFTER_ATTENTION
        else:
            self.awaiting.pop(child, None)

    def activation_ran(self, child: str | None, kernels_in_child: int) -> None:
        """An activation region ran in `child`: an MLP's, where the child runs no kernel."""
        if kernels_in_child == 0:
            self.awaiting[child] = AFTER_ACTIVATION

    def projection_called(self, child: str | None) -> None:
        """A projection of `child` was called: after an attention kernel, the output projection,
        which read what the kernel's output became."""
        if self.awaiting.get(child) == AFTER_ATTENTION:
            del self.awaiting[child]

    def follows(self, child: str | None) -> str | None:
        """What a norm called now in `child` follows (AFTER_ATTENTION, AFTER_ACTIVATION), None
        when it follows neither."""
        return self.awaiting.get(child)


def norm_width(args: tuple) -> int:
    """The width a norm was called on: its input's last dim (0 without a tensor input)."""
    first = args[0] if args else None
    return int(first.shape[-1]) if isinstance(first, torch.Tensor) and first.dim() else 0
