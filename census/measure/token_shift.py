"""Token shifts and token mixes (RWKV's): a copy of the hidden states moved one token later, and
each product the layer takes of such a copy, counted per child.

A token shift (RWKV's time_shift, ZeroPad2d((0, 0, 1, -1))) gives each position the previous
token's row, as a pad of the token dim by one in front and one less behind; a token mix is a
product of that shifted copy (x_{t-1}·(1 − μ)).
"""

from __future__ import annotations

from typing import Any

import torch

from speccat.census.structure.kernel_registry import storage_key

TOKEN_SHIFT_OP = torch.ops.aten.constant_pad_nd.default
TOKEN_MIX_OP = torch.ops.aten.mul.Tensor


def shifts_tokens(x: Any, pad: Any, out: Any, hidden: int) -> bool:
    """A pad of hidden states (b, s, hidden) that moves every row one token later: the token dim
    padded by k in front and cut by k behind, the hidden dim untouched (TOKEN_SHIFT_OP)."""
    return (
        isinstance(x, torch.Tensor)
        and x.dim() == 3
        and int(x.shape[-1]) == hidden
        and tuple(out.shape) == tuple(x.shape)
        and len(pad) == 4
        and pad[0] == pad[1] == 0
        and pad[2] > 0
        and pad[3] == -pad[2]
    )


def note_token_shift(watcher, probe, func, args, kwargs, out) -> None:
    """A pad that shifts the layer's hidden states: its output noted as a shifted copy (watcher.shifted)."""
    if shifts_tokens(args[0], args[1], out, probe.hidden_width):
        watcher.shifted.add(storage_key(out))
        watcher.kept.append(out.untyped_storage())


def note_token_mix(watcher, probe, func, args, kwargs, out) -> None:
    """A product that reads a shifted copy: one token mix of the child running."""
    read = {storage_key(a) for a in args if isinstance(a, torch.Tensor)}
    if read & watcher.shifted:
        probe.token_mixes[watcher.child()] += 1
