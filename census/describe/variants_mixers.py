"""The variant facts of a layer's mixer beyond softmax attention (docs/census.md, "Variant
facts"): a Mamba scan run apart from its conv and its norms, the delta rule's per-channel gate
and what its chain keeps, low-rank gates, the output norm's gate, a linear attention run in
torch and RWKV's token mixes. Each reader is registered with `@variant`
(census/describe/variant_registry.py); its docstring is what docs/census.md's table says it
is read from.
"""

from __future__ import annotations

import torch

from speccat.census.describe.layer_roles import HALF
from speccat.census.describe.mixer_facts import MixerFacts
from speccat.census.describe.variant_registry import variant
from speccat.census.structure.predicates import is_projection


@variant
def scan_apart(view: MixerFacts, top_k: int | None) -> bool:
    """A selective scan ran apart from its causal conv1d (`speccat::selective_scan`: jamba's
    `selective_scan_fn`), with the x, dt and output projections in torch between them."""
    return view.scan_apart()


@variant
def scan_norms(view: MixerFacts, top_k: int | None) -> bool:
    """Norms ran inside the mixer of a scan run apart (jamba's on dt, B and C), not on the hidden
    stream (the input norm of a Mamba layer nested in a hybrid: zamba's)."""
    children = {k.child for k in view.scan_kernels() if k.apart and k.child}
    stream = set(view.stream_norm_paths())
    return any("." in path and view.part(path) in children and path not in stream for path in view.probe.norm_ops)


@variant
def delta_gate_channel_bytes(view: MixerFacts, top_k: int | None) -> int:
    """The delta-rule kernel was `speccat::chunk_kda`: its gate's element bytes (the kernel keeps
    the gate as given); 0 for a gate per head."""
    return view.delta_gate_channel_bytes()


def _delta_gate_kept(view: MixerFacts, dtype: torch.dtype) -> int:
    """Tensors of a per-channel delta gate's shape (value heads, key dim) in `dtype` that the
    mixer's own code keeps outside the kernel."""
    kernels = [k for k in view.delta_kernels() if k.gate_channel_bytes]
    if not kernels:
        return 0
    tail = (kernels[0]["v"][2], kernels[0]["k"][3])
    return sum(n for (op, dims, kept), n in view.probe.kept_tails.items() if kept == dtype and dims == tail and op in {f"child:{c}" for c in view.mixer_children})


@variant
def delta_gate_fp32(view: MixerFacts, top_k: int | None) -> int:
    """The storages the linear attention's own code keeps (outside the kernel) whose last two dims
    are the per-channel gate's (value heads, key dim), fp32: a count of tensors, as `act_saved`
    (kimi_linear's softplus written as exp, log and where: 3; bailing_hybrid's sigmoid of a
    scaled input: 2)."""
    return _delta_gate_kept(view, torch.float32)


@variant
def delta_gate_masks(view: MixerFacts, top_k: int | None) -> int:
    """The storages the linear attention's own code keeps (outside the kernel) whose last two dims
    are the per-channel gate's, bool: a count of tensors (kimi_linear's where: 1; bailing_hybrid's: 0)."""
    return _delta_gate_kept(view, torch.bool)


@variant
def lowrank_width(view: MixerFacts, top_k: int | None) -> int:
    """In a linear-attention layer, the summed input widths of the mixer's projections that read
    neither the hidden states nor the recurrence's output: low-rank gates (kimi_linear's forget
    and output gates: a projection to the head width and back up, 2 × 128), whose inputs are kept."""
    delta = view.delta_kernels()
    if not delta:
        return 0
    out_width = delta[0]["v"][2] * delta[0]["v"][3]
    widths = [int(m.weight.shape[1]) for _, m in view.named(view.mixer_children) if is_projection(m)]
    return sum(w for w in widths if w not in (view.hidden, out_width))


@variant
def gated_norm_sigmoid(view: MixerFacts, top_k: int | None) -> bool:
    """An fp32 sigmoid inside the attention's output norm (KDA's, fla's FusedRMSNormGated as
    transformers writes it: its weight applied in fp32, so it keeps fp32 input, normalised
    input, weighted product and sigmoid output)."""
    return any(
        op.name == "sigmoid" and op.out_dtype == torch.float32
        for path, seen in view.probe.norm_ops.items()
        if view.part(path) in view.mixer_children
        for op in seen
    )


def _linear_eager_children(view: MixerFacts) -> set[str]:
    """The children a linear attention run in torch ran in (none for every other mixer)."""
    return {k.child for k in view.linear_eager_kernels() if k.child}


@variant
def mixer_act(view: MixerFacts, top_k: int | None) -> int:
    """In the child where a linear attention ran in torch: activation calls (owned by that child)."""
    children = _linear_eager_children(view)
    return sum(n for owner, n in view.probe.activations.items() if view.part(owner) in children)


@variant
def mixer_out_gate(view: MixerFacts, top_k: int | None) -> bool:
    """In the child where a linear attention ran in torch: a `sigmoid` of the heads' width."""
    calls = view.linear_eager_kernels()
    width = calls[0]["q"][1] * calls[0]["v"][-1] if calls else 0
    return any(op.name == "sigmoid" and op.out_last == width for c in _linear_eager_children(view) for op in view.probe.router_ops.get(c, []))


@variant
def mixer_out_norms(view: MixerFacts, top_k: int | None) -> int:
    """In the child where a linear attention ran in torch: norm calls inside it (its output norm)."""
    children = _linear_eager_children(view)
    return sum(n for path, n in view.probe.norm_calls.items() if "." in path and view.part(path) in children)


@variant
def mixer_v_head_dim(view: MixerFacts, top_k: int | None) -> int:
    """In the child where a linear attention ran in torch: v's last dim at its first value matmul
    (xLSTM's mLSTM: 512, twice q's head width; minimax's: its head width); 0 for other mixers."""
    calls = view.linear_eager_kernels()
    return int(calls[0]["v"][-1]) if calls else 0


@variant
def mixer_qkv_width(view: MixerFacts, top_k: int | None) -> int:
    """In the child where a linear attention ran in torch: the elements per token of the distinct
    storages its first value matmul's q, k and v are views of (KernelCall.qkv_row): each its own
    projection's output (xLSTM's `weight_mode: single`: q's, k's and v's widths), or one fused
    projection's output whole (xLSTM's `fused`: q, k, v and the output gate's pre-activation;
    minimax's SiLU output: q, k and v); 0 for other mixers."""
    calls = view.linear_eager_kernels()
    return calls[0].qkv_row if calls else 0


@variant
def mixer_qkv_joined(view: MixerFacts, top_k: int | None) -> bool:
    """In the child where a linear attention ran in torch: its first value matmul's q, k and v are
    views of one storage (KernelCall.qk_share_v: xLSTM's fused projection, minimax's SiLU output),
    which q's and k's products keep whatever v's copies; false for other mixers."""
    calls = view.linear_eager_kernels()
    return bool(calls) and calls[0].qk_share_v


def _mixer_out_norm(view: MixerFacts) -> tuple[str | None, int]:
    """The first norm inside the child where a linear attention ran in torch (None without one),
    and the width of the rows it normalises: the last dim of the input of the first op it ran."""
    children = _linear_eager_children(view)
    path = next((p for p in view.probe.norm_calls if "." in p and view.part(p) in children), None)
    row = next((op.in_last for op in view.probe.norm_ops.get(path, []) if op.in_last), 0) if path else 0
    return path, row


@variant
def mixer_out_norm_rows(view: MixerFacts, top_k: int | None) -> int:
    """With an output norm in a linear attention run in torch (`mixer_out_norms`): the rows it
    normalises per token, its weight's width over the width of the rows it ran on (xLSTM's
    multi-head LayerNorm: one per head, 8; minimax's RMSNorm over every head: 1); 0 without."""
    path, row = _mixer_out_norm(view)
    weight = getattr(view.module(path), "weight", None) if path else None
    return int(weight.shape[-1]) // row if isinstance(weight, torch.Tensor) and row else 0


def _mixer_out_norm_kept(view: MixerFacts, dtypes: tuple[torch.dtype, ...]) -> int:
    """Storages of a row's width or wider (its rows joined) in `dtypes` that the linear
    attention's output norm saved per call (census/measure/kept_modules.py holds their elements
    per row saved: each such storage holds the row's width, or the norm's weight's)."""
    path, row = _mixer_out_norm(view)
    if not path or not row:
        return 0
    widths = sum(n // last for (op, _, saved, last, dtype), n in view.probe.kept_modules.items() if op == "normOp" and saved == path and dtype in dtypes and last >= row)
    return widths // max(view.probe.norm_calls[path], 1)


@variant
def mixer_out_norm_fp32(view: MixerFacts, top_k: int | None) -> int:
    """With an output norm in a linear attention run in torch: the fp32 storages of its rows'
    width it saved per call (xLSTM's LayerNorm written as torch ops: its upcast input and its
    centred input, 2); 0 without."""
    return _mixer_out_norm_kept(view, (torch.float32,))


@variant
def mixer_out_norm_half(view: MixerFacts, top_k: int | None) -> int:
    """With an output norm in a linear attention run in torch: the half-precision storages of its
    rows' width it saved per call (xLSTM's: the normalised input its weight multiplies, 1); 0
    without."""
    return _mixer_out_norm_kept(view, HALF)


@variant
def gated_norm(view: MixerFacts, top_k: int | None) -> bool:
    """A SiLU inside the attention's output norm (a linear attention's gated norm)."""
    return any(op.name == "silu" for path, seen in view.probe.norm_ops.items() if view.part(path) in view.mixer_children for op in seen)


@variant
def token_mixes(view: MixerFacts, top_k: int | None) -> int:
    """The products (`mul`) in the mixer's children that read a token-shifted copy of the hidden
    states (a pad of the layer's width that moves each row one token later): RWKV's time mixing,
    x_{t−1}·(1 − μ) once per projection fed (3)."""
    return sum(n for child, n in view.probe.token_mixes.items() if child in view.mixer_children)


@variant
def gated_norm_fp32(view: MixerFacts, top_k: int | None) -> int:
    """Of the tensors of its width the attention's SiLU-gated output norm (`gated_norm`) keeps per
    call, those in fp32 (LayerProbe.norm_fp32_rows: fp32 storages one row of the norm's width
    per row it normalises, its per-row statistic apart): 3 for a norm that applies its weight in
    the compute dtype (Qwen3-Next's: its fp32 input and the gate's fp32 SiLU input and output),
    5 for one that applies its weight in fp32 too (lara_mini's: its normalised input and
    weighted product as well); 0 without a gated norm."""
    paths = [path for path, seen in view.probe.norm_ops.items() if view.part(path) in view.mixer_children and any(op.name == "silu" for op in seen)]
    calls = sum(view.probe.norm_calls.get(path, 0) for path in paths)
    return sum(view.probe.norm_fp32_rows.get(path, 0) for path in paths) // calls if calls else 0


@variant
def conv_input_split(view: MixerFacts, top_k: int | None) -> bool:
    """A scan ran apart, and the causal conv1d calls in its child were handed a storage of their own
    (zamba's x made contiguous apart from the gate), not a view into a larger one (jamba's view of
    in_proj's whole output)."""
    children = {k.child for k in view.scan_kernels() if k.apart}
    convs = [k for k in view.probe.kernels if k.kind == "conv" and k.child in children]
    return bool(convs) and not any(k.in_is_view for k in convs)


@variant
def scan_bc_views(view: MixerFacts, top_k: int | None) -> bool:
    """The selective scans run apart were handed B as a view into a larger storage (zamba's per-head
    slices of the x projection's output, unit last stride), which SelectiveScanFn does not copy."""
    scans = [k for k in view.scan_kernels() if k.apart]
    return bool(scans) and all(k.bc_is_view for k in scans)
