"""Layer code the records price by facts of their own, read off which module saved each kept
storage (LayerProbe.kept_modules): stream code in a module of its own, a router MLP, torch's
convolutions beside an attention kernel and a QK-norm run in the compute dtype (zaya's).

In detail (census/measure/kept_modules.py records the storages):

- code on the hidden stream written as a module of its own (census/measure/stream_code.py: zaya's
  residual scaling), booked after the child that ran before it: its bytes per hidden channel;
- a router that is an MLP of its own between the hidden states and the scores (zaya's: down to a
  narrower width, a norm, projections with activations between them): its width, and the
  projection, activation and norm calls at that width;
- torch's own convolutions in an attention's child (zaya's depthwise and grouped Conv1d over q
  and k, before the kernel), which keep their inputs, priced as `attention_conv_bytes`;
- a QK-norm with no weight run in the compute dtype (zaya's L2 norm of q and k to sqrt(head_dim),
  with a learned scale per key head): its statistics per head and the key rows it keeps beyond
  its input.

Each is read off what ran: module kinds (projections, norms, activations) and the probe's kept
storages by shape and dtype, never a class name.
"""

from __future__ import annotations

import torch
from torch import nn

from speccat.census.describe.feed_forward_facts import FeedForwardFacts
from speccat.census.describe.layer_roles import HALF, LayerRoles
from speccat.census.measure.stream_code import STREAM
from speccat.census.structure.predicates import is_norm, is_projection


def stream_code_bytes(view: LayerRoles, children: set[str]) -> int:
    """Bytes per token and hidden channel that stream code in a module of its own kept after one
    of `children` (booked `stream:CHILD`): its storages one hidden width a token, each
    element's bytes (LayerProbe.kept_modules holds their elements per row)."""
    hidden = view.hidden
    if not hidden:
        return 0
    ops = {f"{STREAM}{child}" for child in children}
    kept = sum(n * dtype.itemsize for (op, _, _, last, dtype), n in view.probe.kept_modules.items() if op in ops and last == hidden)
    return kept // hidden


def _inside(path: str, roots) -> bool:
    return any(path == root or path.startswith(root + ".") for root in roots)


def router_modules(view: FeedForwardFacts) -> list[tuple[str, nn.Module]]:
    """The MoE block's modules outside its routed experts, shared experts and a latent MoE's
    projections around the experts: the router's."""
    block = view.moe_block
    if block is None:
        return []
    down, up = view.latent_projections()
    outside = [*view.experts_group, *(path for path, _ in view.shared_children()), *down, *up]
    return [(path, m) for path, m in view.named({block}) if not _inside(path, outside)]


def router_mlp_width(view: FeedForwardFacts) -> int:
    """The input width of the router's projections that read a width other than the hidden size,
    in a router where an activation ran: a router MLP's hidden width (zaya's 256), the widest
    where several; 0 for a router of projections from the hidden size, or of projections alone."""
    modules = router_modules(view)
    paths = {path for path, _ in modules}
    if not any(owner in paths for owner in view.probe.activations):
        return 0
    widths = {int(m.weight.shape[1]) for _, m in modules if is_projection(m) and int(m.weight.shape[1]) != view.hidden}
    return max(widths, default=0)


def router_mlp_calls(view: FeedForwardFacts) -> tuple[int, int, int]:
    """(projection calls reading the router MLP's width, activation calls in the router, norm
    calls over that width in the router), per layer call: (0, 0, 0) without a router MLP."""
    width = router_mlp_width(view)
    if not width:
        return 0, 0, 0
    modules = router_modules(view)
    paths = {path for path, _ in modules}
    projections = {path for path, m in modules if is_projection(m) and int(m.weight.shape[1]) == width}
    order = view.probe.projection_order.get(view.moe_block, [])
    calls = sum(1 for path in order if path in projections)
    acts = sum(n for owner, n in view.probe.activations.items() if owner in paths)
    norms = sum(
        view.probe.norm_calls[path]
        for path, m in modules
        if is_norm(m) and getattr(m, "weight", None) is not None and int(m.weight.shape[-1]) == width
    )
    return calls, acts, norms


def half_qk_norm(view: LayerRoles) -> tuple[int, int]:
    """(statistics per head, key rows beyond the input per key head) that a QK-norm with no
    weight run in the compute dtype kept: a norm in an attention kernel's child, off the stream,
    holding no `weight`, that cast nothing to fp32 and ran on rows one head wide (zaya's
    ZayaQKNorm: its input q and k, three statistics per head, and the normalised keys a learned
    per-head scale multiplies); (0, 0) for the others."""
    kernels = [k for k in view.probe.kernels if k.kind == "attention"]
    if not kernels:
        return 0, 0
    heads, kv_heads, head_dim = kernels[0]["q"][1], kernels[0]["k"][1], kernels[0]["q"][3]
    stream = set(view.stream_norm_paths())
    for path, seen in view.probe.norm_ops.items():
        if view.part(path) not in view.mixer_children or path in stream or getattr(view.module(path), "weight", None) is not None:
            continue
        if any(op.out_dtype == torch.float32 for op in seen) or not any(op.out_last == head_dim for op in seen):
            continue
        # its storages in the compute dtype, each as its elements per row (one head a row here):
        # a statistic per head counts 1, a row one head wide head_dim; q's and k's alike, twice
        kept = [(last, n) for (_, _, saved, last, dtype), n in view.probe.kept_modules.items() if saved == path and dtype in HALF]
        stats = sum(n for last, n in kept if last == 1) // 2
        extra = sum(n for last, n in kept if last == head_dim) // head_dim - 2  # beyond its input q and k
        # the extra rows are per key head where more than one storage of the keys' shape was kept
        key_shaped = sum(n for (op, tail, dtype), n in view.probe.kept_tails.items() if op == "normOp" and tail == (kv_heads, head_dim) and dtype in HALF)
        if stats:
            return stats, max(extra, 0) if kv_heads == heads or key_shaped > 1 else 0
    return 0, 0


def torch_conv_bytes(view: LayerRoles) -> int:
    """Bytes per token of the inputs torch's own convolutions keep in an attention kernel's child,
    in a layer whose only other kernel is the causal-conv1d one: each kept input's channels (its
    module's `in_channels`) times its element bytes (zaya's two Conv1d over q and k, 1280
    channels each, bf16: 5120). A convolution's input padded with the few columns of its kernel
    counts as the tokens' (k - 1 columns a sequence, not a token's)."""
    kinds = {k.kind for k in view.probe.kernels}
    if "attention" not in kinds or kinds - {"attention", "conv"}:
        return 0
    ops = {f"child:{k.child}" for k in view.probe.kernels if k.kind == "attention"}
    total = 0
    for (op, _, saved, _, dtype), n in view.probe.kept_modules.items():
        module = view.module(saved) if op in ops and saved else None
        if isinstance(module, nn.modules.conv._ConvNd):
            total += module.in_channels * dtype.itemsize
    return total
