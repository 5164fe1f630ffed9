"""The census's forward FLOPs of one layer: torch's FlopCounterMode around the probe's forward
(docs/census.md, "Measured FLOPs"), with the FLOP counts of the ops FlopCounterMode does not
know registered here.

FlopCounterMode counts matmuls (2·m·n·k), convolutions and its own attention ops, and nothing
for element-wise ops. The census's kernels are custom ops (census/kernels/ops.py, census/kernels/scans.py,
census/kernels/scan_apart.py) and the experts run `aten._grouped_mm`: FlopCounterMode counts each 0
unless a count is registered for it. Each count below is what FlopCounterMode counts for the
same work written in the ops it knows:

- `speccat::flash_attention`: both products of the core, 2·b·heads·s_q·s_kv·d for the scores
  and 2·b·heads·s_q·s_kv·dv for probabilities × values, as its SDPA count: a mask (causal, a
  sliding window, DeepSeek's sparse indices) shortens nothing.
- `aten._grouped_mm`: 2·m·n·k over the rows the groups hold (the token slots the router chose).
- `speccat::causal_conv1d`: the depthwise convolution, 2·b·channels·s·width, as its convolution count.
- `speccat::mamba_inner` (Mamba's fused mixer after its in-projection): its convolution and its
  x, dt and output projections, which run inside the op.
- `speccat::mamba_split_conv1d_scan` (Mamba2's): its convolution and its output projection.

The recurrences themselves (the selective scan, SSD's scan, the gated delta rule, RWKV's WKV, the RG-LRU's) count 0:
element-wise multiply-adds over the state, which FlopCounterMode counts 0 when written in torch.
A kind that runs one is measured short of the records' price by that recurrence (costs.yaml
prices the delta rule as attention over its 64-token chunk).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from math import prod

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

import speccat.census.kernels.ops  # noqa: F401  (defines the ops counted here)
import speccat.census.kernels.scan_apart  # noqa: F401
import speccat.census.kernels.scans  # noqa: F401

ops = torch.ops


@register_flop_formula(ops.speccat.flash_attention)
def _flash_attention(q, k, v, *args, out_shape=None, **kwargs) -> int:
    b, heads, s_q, d = q
    s_kv, dv = k[2], v[-1]
    return 2 * b * heads * s_q * s_kv * (d + dv)


@register_flop_formula(ops.aten._grouped_mm)
def _grouped_mm(a, b, *args, out_shape=None, **kwargs) -> int:
    if len(a) == 2 and len(b) == 2:  # groups along the contraction: each row meets each column once over all of k
        return 2 * a[0] * a[1] * b[1]
    return 2 * prod(out_shape) * a[-1]


def _conv(x, weight) -> int:
    """A depthwise causal convolution of x (b, channels, s) with weight (channels, width)."""
    return 2 * prod(x) * weight[-1]


@register_flop_formula(ops.speccat.causal_conv1d)
def _causal_conv1d(x, weight, *args, out_shape=None, **kwargs) -> int:
    return _conv(x, weight)


@register_flop_formula(ops.speccat.mamba_inner)
def _mamba_inner(xz, conv_w, conv_b, x_proj_w, dt_proj_w, out_proj_w, *args, out_shape=None, **kwargs) -> int:
    b, two_inner, s = xz
    x = (b, two_inner // 2, s)
    tokens = b * s
    projections = prod(x_proj_w) + prod(dt_proj_w) + prod(out_proj_w)
    return _conv(x, conv_w) + 2 * tokens * projections


@register_flop_formula(ops.speccat.mamba_split_conv1d_scan)
def _mamba_split_conv1d_scan(zxbcdt, conv_w, conv_b, dt_bias, A, D, rms_w, out_w, *args, out_shape=None, **kwargs) -> int:
    b, s, _ = zxbcdt
    projection = 2 * b * s * prod(out_w) if out_w is not None else 0
    return _conv((b, conv_w[0], s), conv_w) + projection


class LayerFlops:
    """FlopCounterMode over a forward, read back per layer: `of(layer)` is the FLOPs counted
    while `layer` (a module of the forward's outermost module `top`) ran."""

    def __init__(self, top: nn.Module):
        self.top = top
        self.counter = FlopCounterMode(display=False)

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        with self.counter:
            yield

    def of(self, layer: nn.Module) -> int:
        # FlopCounterMode keys its counts by module path below the outermost module that ran,
        # which it names by its class
        path = next(name for name, module in self.top.named_modules() if module is layer)
        counts = self.counter.get_flop_counts().get(f"{type(self.top).__name__}.{path}", {})
        return int(sum(counts.values()))
