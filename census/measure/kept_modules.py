"""Which module made each storage a probed layer keeps, which module's code saved it for
backward, and its elements per row of the tensor saved (LayerProbe.kept_modules).

The ops a storage is booked to (census/measure/booking.py) name a layer's child at most; a part
of a child written as plain code, not as modules the census knows, is told from its siblings by
the modules it ran in: a MoE block's shared experts whose gate is inline code (minimax-m3's
clamped SwiGLU, a chain of clamps, a sigmoid and products) keep more than an activation module
would, beside the router and the routed experts in the same child. A storage's elements per row
of the tensor saved are its bytes per token over its element's bytes wherever the rows are the
tokens, whatever dims stand before them (a view (tokens, w) of a fused (tokens, 2w) output
holds 2w a row).
"""

from __future__ import annotations

import torch

from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.structure.predicates import is_projection


def saver(path: list, tensor: torch.Tensor) -> tuple[str | None, int]:
    """What Watcher.pack notes of one saver: the innermost module running (its path in the layer,
    None in the layer's own code) and the rows of the tensor it saves (its elements over its last
    dim; 0 for a 0-dim tensor or an empty last dim, and for a vector: one dim holds no rows of
    tokens, a per-channel value computed from parameters alone, ergo's residual gates' sigmoid of
    their weight, is kept once whatever the tokens)."""
    last = int(tensor.shape[-1]) if tensor.dim() > 1 else 0
    return (path[-1][0] if path else None), (tensor.numel() // last if last else 0)


def note_kept_module(watcher, probe: LayerProbe, key: int, index: int, op: str, nbytes: int) -> None:
    """Book a kept storage's elements per row under (its op, the module that made it, the module
    whose code saved it, the saved tensor's last dim, its dtype): `index` is its first saver still
    alive, whose module and rows count. A storage another layer or the decoder made has no maker
    here (None); one saved with no rows is left out."""
    made = watcher.creator.get(key)
    made_in = made.module if made is not None and made.probe is probe else None
    saved_in, rows = watcher.saved_in[key][index]
    tail, dtype = watcher.tails[key]
    if rows and tail:
        probe.kept_modules[(op, made_in, saved_in, int(tail[-1]), dtype)] += nbytes // dtype.itemsize // rows


def note_code_kept(watcher, probe: LayerProbe, key: int, index: int, op: str, nbytes: int) -> None:
    """Book a kept storage's bytes under its op (LayerProbe.code_kept) where it is booked to a child
    (`child:NAME`), the tensor that first saved it spans the hidden width (one of its last two
    dims: AltUp's streams are kept as (tokens, width, streams)), and its first saver still alive,
    `index`, ran in no projection: the child's own code or the layer's code after it kept it
    (AltUp's predict and correct, methods the layer calls between its children), not a
    projection's input, which the side inputs' widths price, nor a few coefficients a token."""
    if not op.startswith("child:") or probe.hidden_width not in watcher.tails[key][0]:
        return
    path = watcher.saved_in[key][index][0]
    if path is not None and is_projection(watcher.layers[probe.index].get_submodule(path)):
        return
    probe.code_kept[op] += nbytes
