"""Code on the hidden stream written as a module of its own: a child of the layer that holds no
module and only per-channel parameters (vectors, no weight matrix), and is no norm or activation
(zaya's ZayaResidualScaling, (x + b)·s + (r + b')·s', after the attention and after the MLP).

It is the layer's own code between its children, as a residual gate written in the layer's
forward is (mllama's tanh gates), only put in a module: what it keeps is booked as that code's
is, to the child that ran last (census/measure/watcher.py), not to `other`; and it is never the
child that ran last itself. Its facts (`stream_code_attn_bytes`, `stream_code_ff_bytes`) read
what it kept (LayerProbe.kept_modules) by the module that saved it.
"""

from __future__ import annotations

from torch import nn

from speccat.census.structure.predicates import is_activation_region, is_norm


def is_stream_code(module: nn.Module) -> bool:
    """A module with per-channel parameters only (at least one, each at most one dim), no
    children, that is no norm and no activation: elementwise code on the stream."""
    params = list(module.parameters(recurse=False))
    return (
        bool(params)
        and all(p.dim() <= 1 for p in params)
        and not any(True for _ in module.children())
        and not is_norm(module)
        and not is_activation_region(module)
    )

# the op prefix what it keeps is booked under, before the child that ran before it: resolved as
# that child's own ("child:") is (census/describe/layer_view.py), and kept apart from it so that
# no reader of that child's storages counts it
STREAM = "stream:"
