"""What a module of a built layer is: a norm, a projection, an activation, routed experts, a
state-space mixer, a selective-scan, gated-delta-rule (or Kimi delta attention), WKV or RG-LRU runner or a user of transformers' attention interface.

Every part of the census asks these questions of modules (building, classifying layers into
shapes, probing, describing); they are answered here only, from the module's class, its
attributes and the global names its forward reads, never by running it. Which kernels a
module's forward calls is read off the kernels' records (census/structure/kernel_registry.py):
each names the function it stands in for, and the mixer questions ask by the records' kinds.
"""

from __future__ import annotations

import inspect
import re
import sys
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from transformers import activations as hf_activations

from speccat.census.structure.kernel_registry import Kernel, kernels
# State-space mixers no family prices, by class name (MambaMixer, ...SSM...) or attribute name (mamba, ssm).
_STATE_SPACE_CLASS = re.compile(r"Mamba|SSM|StateSpace")
QK_NORM_NAME = re.compile(r"^(q|k|query|key)_?(norm|layernorm|ln)$")  # q_norm, k_norm, query_layernorm...
_STATE_SPACE_ATTRIBUTE = re.compile(r"^(mamba|ssm)", re.IGNORECASE)

_ACTIVATION_CLASSES = tuple(
    {v[0] if isinstance(v, tuple) else v for v in hf_activations.ACT2CLS.values()}
    | {c for c in vars(nn.modules.activation).values() if isinstance(c, type) and issubclass(c, nn.Module)}
    - {nn.Module, nn.MultiheadAttention, nn.Softmax, nn.Softmax2d, nn.LogSoftmax, nn.Softmin}
)

# A norm class's name ends in Norm, or in Norm and one of the qualifiers transformers' norms carry.
NORM_CLASS = re.compile(r"Norm(Gated|1P|PerHead)?$")


def is_norm(module: nn.Module) -> bool:
    """A normalisation module: torch's norms, and the models' own classes whose name ends in a norm
    (LlamaRMSNorm, Qwen3NextRMSNormGated, NemotronLayerNorm1P, StableLmLayerNormPerHead, a gated
    norm holding its gate MLP: AXK2GatedRMSNorm). A class that only carries "Norm" inside its
    name is not one: roberta-prelayernorm's RobertaPreLayerNormIntermediate is a feed-forward block;
    nor is a block so named that holds an attention (dbrx's DbrxNormAttentionNorm: norm_1, attn,
    norm_2), which no normalisation does."""
    return _is_norm_class(type(module)) and not (any(True for _ in module.children()) and any(uses_attention_interface(m) for m in module.modules()))


@lru_cache(maxsize=None)
def _is_norm_class(cls: type) -> bool:
    """is_norm by class (asked of every module on the probe's path at every op)."""
    return issubclass(cls, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)) or NORM_CLASS.search(cls.__name__) is not None


def is_layer_norm(module: nn.Module) -> bool:
    """Mean-centred (LayerNorm) rather than RMS normalisation."""
    return isinstance(module, nn.LayerNorm) or ("LayerNorm" in type(module).__name__ and "RMS" not in type(module).__name__)


# A model's own activation class (BloomGelu): its name ends in an activation's.
ACTIVATION_CLASS = re.compile(r"(Gelu|GELU|GeLU|SiLU|Silu|Swish|ReLU|Relu)$")


def is_activation(module: nn.Module) -> bool:
    """An activation module: transformers' ACT2CLS classes and torch's (softmaxes excluded), or a
    model's own leaf module with no parameters whose class name ends in an activation's."""
    if isinstance(module, _ACTIVATION_CLASSES):
        return True
    return ACTIVATION_CLASS.search(type(module).__name__) is not None and not any(True for _ in module.children()) and not any(True for _ in module.parameters())


def is_activation_region(module: nn.Module) -> bool:
    """An activation module, or a wrapper the probe marked as one (an experts' inline gate)."""
    return is_activation(module) or getattr(module, "_speccat_activation", False)  # set by census/measure/inline_activations.py's wrapper


def is_projection(module: nn.Module) -> bool:
    """A leaf module with a 2-D weight that is not an embedding or a norm: a linear projection."""
    weight = getattr(module, "weight", None)
    return (
        isinstance(weight, torch.Tensor)
        and weight.dim() == 2
        and not any(True for _ in module.children())
        and not isinstance(module, nn.Embedding)
        and not is_norm(module)
    )


def is_experts_interface(module: nn.Module) -> bool:
    """Routed experts built with transformers' experts interface (fused 3-D weights, run by
    grouped_mm over the token slots the router chose)."""
    return hasattr(module, "num_experts") and hasattr(module, "has_gate") and hasattr(module, "is_concatenated")


def has_expert_dimension(module: nn.Module) -> bool:
    """Every parameter of the module's own carries one leading expert dimension (3-D weights,
    2-D biases, at least two experts), and no child holds parameters: the shape of routed
    experts outside the experts interface (llama4's Llama4TextExperts), or of shared experts
    stacked alike. The first sizes may differ: experts that hold only some of the weights
    (longcat_flash's zero experts in transformers 5.24, slices of gate_up_proj that no
    down_proj follows) are
    candidates the router chooses among (expert_candidates), not experts that compute
    (expert_count)."""
    own = list(module.parameters(recurse=False))
    if not any(p.dim() == 3 for p in own) or any(p.dim() not in (2, 3) for p in own):
        return False  # asked first: most modules hold no 3-D weight of their own
    if is_experts_interface(module) or isinstance(module, nn.modules.conv._ConvNd) or any(True for c in module.children() for _ in c.parameters()):
        return False
    return min(int(p.shape[0]) for p in own) >= 2


_STACKED = "_speccat_stacked_experts"  # set on the built layer's module by mark_stacked_experts
_FLAT = "_speccat_flat_experts"  # the experts flattened into its weights' rows, set beside _STACKED


def holds_flat_weights(module: nn.Module) -> bool:
    """The shape of experts whose expert dimension is flattened into their weights' rows: the
    module's own parameters are 2-D weights (and 1-D biases), its children hold none, and it is
    no projection, norm, embedding or convolution. Most modules with 2-D weights of their own
    are projections; what tells these apart is the router beside them (flat_router)."""
    own = list(module.parameters(recurse=False))
    if not any(p.dim() == 2 for p in own) or any(p.dim() not in (1, 2) for p in own):
        return False
    if is_projection(module) or is_norm(module) or isinstance(module, (nn.Embedding, nn.modules.conv._ConvNd)) or is_experts_interface(module):
        return False
    return not any(True for c in module.children() for _ in c.parameters())


def flat_router(layer: nn.Module, name: str, experts: nn.Module) -> nn.Module | None:
    """The router of experts flattened into their weights' rows (holds_flat_weights; dbrx's
    DbrxExpertGLU: w1, v1, w2 each (16 experts x 10752 rows, 6144)): a projection outside them,
    in the nearest block around them that holds one, whose input is every weight's columns (the
    hidden size) and whose outputs (the experts) are at least two and divide every weight's rows
    and bias's length into at least two rows an expert. The fewest such outputs where a block
    holds several."""
    own = list(experts.parameters(recurse=False))
    inside = set(map(id, experts.modules()))
    path = name.split(".")
    for depth in range(len(path) - 1, -1, -1):
        block = layer.get_submodule(".".join(path[:depth])) if depth else layer
        if any(is_experts_interface(m) for m in block.modules()):
            return None
        outputs = [
            m for m in block.modules()
            if id(m) not in inside and is_projection(m) and _splits_rows(own, int(m.weight.shape[0]), int(m.weight.shape[1]))
        ]  # fmt: skip
        if outputs:
            return min(outputs, key=lambda m: int(m.weight.shape[0]))
    return None


def _splits_rows(own: list[nn.Parameter], experts: int, hidden: int) -> bool:
    """Every 2-D weight is (experts x rows, hidden) and every 1-D bias experts x rows long, at least
    two experts of at least two rows each."""
    return experts >= 2 and all(
        int(p.shape[0]) % experts == 0 and int(p.shape[0]) >= 2 * experts and (p.dim() == 1 or int(p.shape[1]) == hidden) for p in own
    )


def mark_stacked_experts(layer: nn.Module, marks: dict[str, int] | None = None) -> dict[str, int]:
    """Mark the layer's stacked experts, told by structure: a module with an expert dimension
    (has_expert_dimension) in a block that holds no experts of the interface and a router, a
    projection with one output per expert (router_of); or a module whose 2-D weights hold the
    experts one after another in their rows (holds_flat_weights), with a router whose outputs
    divide those rows (flat_router): read as if its weights were (experts, rows / experts,
    columns). How they run (every expert over every token, or only the chosen slots) is
    measured by the probe, never read from the class. The mark is an attribute of this built
    module only. Returns the marked modules' names -> the experts flattened into their rows (0
    for an expert dimension); given `marks` (what a layer built alike got), marks those without
    looking again."""
    if marks is None:
        marks = {}
        for name, module in layer.named_modules():
            if not name:
                continue
            if has_expert_dimension(module):
                block = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                if not any(is_experts_interface(m) for m in block.modules()) and router_of(block, module) is not None:
                    marks[name] = 0
            elif holds_flat_weights(module):
                router = flat_router(layer, name, module)
                if router is not None:
                    marks[name] = int(router.weight.shape[0])
    for name, flat in marks.items():
        module = layer.get_submodule(name)
        object.__setattr__(module, _STACKED, True)
        if flat:
            object.__setattr__(module, _FLAT, flat)
    return marks


def is_stacked_experts(module: nn.Module) -> bool:
    """Routed experts outside the experts interface, as mark_stacked_experts found them."""
    return bool(getattr(module, _STACKED, False))


def is_experts(module: nn.Module) -> bool:
    """Routed experts: transformers' experts interface, or experts with a leading expert dimension."""
    return is_experts_interface(module) or is_stacked_experts(module)


def stacked_shapes(module: nn.Module) -> list[tuple[int, int, int]]:
    """(experts, rows, columns) of each weight of stacked experts, in module order: a 3-D weight's
    shape, or a weight holding the experts in its rows (mark_stacked_experts) seen as one slice
    of rows an expert, as its code views it (dbrx's (16 x 10752, 6144) as (16, 10752, 6144))."""
    flat = getattr(module, _FLAT, 0)
    if flat:
        return [(flat, int(p.shape[0]) // flat, int(p.shape[1])) for p in module.parameters(recurse=False) if p.dim() == 2]
    return [tuple(int(n) for n in p.shape) for p in module.parameters(recurse=False) if p.dim() == 3]


def expert_count(module: nn.Module) -> int:
    """The routed experts a module holds that compute: the leading dimension every one of its
    weights has (the smallest)."""
    if is_experts_interface(module):
        return int(module.num_experts)
    return min(shape[0] for shape in stacked_shapes(module))


def expert_candidates(module: nn.Module) -> int:
    """The experts a router chooses among: the largest leading dimension of the weights (beyond
    expert_count, experts that compute nothing: longcat_flash's zero experts pass a token on).
    The interface's experts hold only those that compute; a router may choose among more (see
    census/describe/feed_forward_facts.py's router_candidates)."""
    if is_experts_interface(module):
        return int(module.num_experts)
    return max(shape[0] for shape in stacked_shapes(module))


def expert_width(module: nn.Module, hidden: int) -> int:
    """One expert's width: the interface's intermediate size; for stacked experts, read off the
    last weight (the one back to the hidden size) when it is (experts, width, hidden), as bmm
    multiplies, or (experts, hidden, width), as F.linear's (out, in) (longcat_flash's down_proj
    after a gate_up_proj of (experts, 2·width, hidden)); else the input width of the last weight
    that maps back to the hidden size, else the output width of one read from it. Weights
    holding the experts in their rows are read as stacked_shapes sees them (dbrx's w2, (16 x
    10752, 6144): 10752)."""
    if is_experts_interface(module):
        stated = getattr(module, "intermediate_dim", None) or getattr(module, "intermediate_size", None)
        if stated:
            return int(stated)  # else read off its weights, as for stacked experts (ergo's ErgoExperts states no width)
    weights = stacked_shapes(module)
    last = weights[-1]
    if last[2] == hidden:
        return last[1]
    if last[1] == hidden and len(weights) > 1 and weights[0][2] == hidden:
        return last[2]
    back = [shape for shape in weights if shape[2] == hidden]
    if back:
        return back[-1][1]
    return next(shape for shape in weights if shape[1] == hidden)[2]


def router_of(block: nn.Module, experts: nn.Module) -> nn.Module | None:
    """The router of stacked experts: a projection beside them in their block (at any depth
    outside them) with one output per expert."""
    inside = set(map(id, experts.modules()))
    count = expert_candidates(experts)
    return next((m for m in block.modules() if id(m) not in inside and is_projection(m) and int(m.weight.shape[0]) == count), None)


def experts_bias(module: nn.Module) -> bool:
    """The experts' projections carry biases: one dimension fewer than the weights (2-D beside
    3-D weights; 1-D beside weights holding the experts in their rows)."""
    if is_experts_interface(module):
        return bool(module.has_bias)
    bias_dim = 1 if getattr(module, _FLAT, 0) else 2
    return any(p.dim() == bias_dim for p in module.parameters(recurse=False))


def is_state_space_mixer(name: str, module: nn.Module) -> bool:
    """A state-space mixer (Mamba, SSM), by its class name or the attribute name it is held under."""
    leaf = name.rsplit(".", 1)[-1]
    return not is_norm(module) and bool(_STATE_SPACE_CLASS.search(type(module).__name__) or _STATE_SPACE_ATTRIBUTE.search(leaf))


# How deep the census follows the functions a forward calls to find the kernels it reaches
# (the forward → causal_conv1d_forward → causal_conv1d_fn in transformers 5.25).
_CALL_DEPTH = 3


def kernel_hook_name(obj: Any) -> str | None:
    """The name transformers gives a kernelizable function: the `kernel_layer_name` that the
    kernels package's use_kernel_forward_from_hub sets (transformers' hub-kernel names, such as
    `causal_conv1d_fn` or `chunk_gated_delta_rule`). It names what the function is, whatever
    a modeling file calls it (5.25's `mamba_selective_scan` is the hook `selective_scan_fn`)."""
    name = getattr(obj, "kernel_layer_name", None)
    return name if isinstance(name, str) else None


def _hooked_function(obj: Any) -> Any:
    """The Python function behind a kernel hook (kernels wraps a function into a module whose
    forward closes over it), else the object itself."""
    if kernel_hook_name(obj) is not None and not inspect.isfunction(obj):
        forward = getattr(type(obj), "forward", None)
        if inspect.isfunction(forward):
            return inspect.getclosurevars(forward).nonlocals.get("func", obj)
    return obj


def _reads(function: Any) -> tuple[Any, tuple[str, ...]]:
    """(the module whose globals a function reads, the global names its code reads)."""
    function = inspect.unwrap(function) if callable(function) else function
    code = getattr(function, "__code__", None)
    home = sys.modules.get(getattr(function, "__module__", None) or "")
    return home, (code.co_names if code is not None else ())


@lru_cache(maxsize=None)
def reached(cls: type) -> tuple[tuple[str, Any, str], ...]:
    """(identity, home module, global name) of every global a module class's forward reads,
    directly or through the functions it calls in its own modeling file and through kernel
    hooks: the identity is the hook's name where the global is a kernel hook, else the global's
    own name. The census finds its kernels' stand-ins by these identities, so a kernel moved
    into a helper or renamed in a modeling file is still found by the hook transformers lists it
    under (docs/census.md, "Kernels found by what they are"). Read once per class for the
    process (`forget_reached`)."""
    start_home, start_names = _reads(cls.forward)
    own_file = cls.__module__
    found: dict[tuple[int, str], tuple[str, Any, str]] = {}
    frontier = [(start_home, start_names)]
    for _ in range(_CALL_DEPTH):
        following = []
        for home, names in frontier:
            for name in names:
                obj = getattr(home, name, None) if home is not None else None
                key = (id(home), name)
                if key in found:
                    continue
                hook = kernel_hook_name(obj)
                found[key] = (hook or name, home, name)
                function = _hooked_function(obj)
                if hook is not None or (inspect.isfunction(function) and function.__module__ == own_file):
                    following.append(_reads(function))
        frontier = following
    return tuple(found.values())


@lru_cache(maxsize=None)
def forward_names(cls: type) -> tuple[str, ...]:
    """The identities of the globals a module class's forward reads, through the functions and
    kernel hooks it calls (`reached`)."""
    return tuple(identity for identity, _, _ in reached(cls))


@lru_cache(maxsize=None)
def _calls(cls: type, pattern: re.Pattern) -> bool:
    """Whether a module class's forward reaches a global whose identity matches the pattern
    (asked of every module of every layer while classifying: answered once per class)."""
    return any(pattern.search(name) for name in forward_names(cls))


def forget_reached() -> None:
    """Read every class's calls again from now on: what `reached` and the questions built on it
    kept (a test that changes a modeling module's globals)."""
    for cached in (reached, forward_names, _calls):
        cached.cache_clear()


def _targets(module: nn.Module, kernel: Kernel) -> list[tuple[Any, str]]:
    """(holder, name) of each callable the module's forward reaches that `kernel` stands in for:
    a global of the module whose globals the calling code reads, or a method of the module's
    class (`Kernel.method`). Where the probe points the name at the stand-in while the layer runs."""
    cls = type(module)
    if kernel.method:
        return [(cls, n) for n in forward_names(cls) if kernel.calls.search(n) and callable(getattr(cls, n, None))]
    return [
        (home, name)
        for identity, home, name in reached(cls)
        if home is not None and kernel.calls.search(identity) and callable(getattr(home, name, None))
    ]


def calls_kernel(module: nn.Module, kernel: Kernel) -> bool:
    """Whether the module's forward calls the function `kernel` stands in for."""
    if kernel.calls is None:
        return False
    if kernel.method:
        return bool(_targets(module, kernel))
    return _calls(type(module), kernel.calls)


def kernel_sites(module: nn.Module) -> list[tuple[Kernel, Any, str]]:
    """(kernel, holder, name) of each function the module's forward calls that a registered
    kernel stands in for: the probe points `holder.name` at the kernel's stand-in while the
    layer runs."""
    return [(kernel, holder, name) for kernel in kernels() if kernel.calls is not None for holder, name in _targets(module, kernel)]


def _runs(module: nn.Module, kind: str, fuses_conv: bool | None = None) -> bool:
    """Whether the module's forward calls a registered kernel of that kind (KernelCall.kind), and
    of that `fuses_conv` when it is given."""
    return any(calls_kernel(module, k) for k in kernels() if k.kind == kind and (fuses_conv is None or k.fuses_conv == fuses_conv))


def runs_delta_rule(module: nn.Module) -> bool:
    """Whether the module's forward calls a gated delta rule (the linear-attention recurrence),
    with a gate per head or per key channel (Kimi delta attention)."""
    return _runs(module, "delta_rule")


def runs_selective_scan(module: nn.Module) -> bool:
    """Whether the module's forward calls mamba_ssm's fused selective scan (a Mamba mixer), or
    runs it apart: the selective scan after the causal conv1d, with its projections in torch."""
    return runs_fused_scan(module) or runs_scan_apart(module)


def runs_fused_scan(module: nn.Module) -> bool:
    """Whether the module's forward calls mamba_ssm's fused Mamba mixer (`mamba_inner_fn`): in
    training it takes that path (and its torch scan only when the fused one is absent)."""
    return _runs(module, "scan", fuses_conv=True)


def runs_scan_apart(module: nn.Module) -> bool:
    """Whether the module's forward calls the selective scan and the causal conv1d, and no fused
    mixer: its projections, norms and gate run in torch between the two kernels (jamba)."""
    return not runs_fused_scan(module) and _runs(module, "scan", fuses_conv=False) and _runs(module, "conv")


def runs_ssd_scan(module: nn.Module) -> bool:
    """Whether the module's forward calls mamba_ssm's fused Mamba2 mixer (conv and chunked SSD scan)."""
    return _runs(module, "ssd")


def holds_scan(module: nn.Module) -> bool:
    """A block around a Mamba or Mamba2 mixer: some module under it runs the scan (zamba2's
    mamba_decoder, a decoder layer of its own nested in a hybrid layer)."""
    return any(runs_selective_scan(m) or runs_ssd_scan(m) for m in module.modules())


def runs_short_conv(module: nn.Module) -> bool:
    """A short-convolution mixer (LFM2's ShortConv): its forward calls causal_conv1d_fn, and all
    it holds is one depthwise Conv1d between two projections (in and out). Recurrent mixers
    also run a causal conv1d first, but hold more (Kimi's delta attention, Mamba's A and D)."""
    if not _runs(module, "conv"):
        return False
    leaves = [m for m in module.modules() if not any(True for _ in m.children()) and any(True for _ in m.parameters(recurse=False))]
    convs = [m for m in leaves if isinstance(m, nn.Conv1d) and m.groups == m.in_channels]
    own = [p for p in module.parameters(recurse=False)]
    return len(convs) == 1 and not own and sum(1 for m in leaves if is_projection(m)) == 2 and len(leaves) == 3


def expects_conv_kernel(module: nn.Module) -> bool:
    """A mixer whose training path runs its causal convolution in a kernel (causal-conv1d, or
    fused into the scan): a gated delta rule, a Mamba or Mamba2 mixer, a short convolution. A
    depthwise convolution run in torch inside one is a fallback the census did not stand in
    for (census/measure/kernel_fallback.py refuses it as `kernel_fallback`)."""
    return runs_delta_rule(module) or runs_selective_scan(module) or runs_ssd_scan(module) or runs_short_conv(module)


def runs_wkv(module: nn.Module) -> bool:
    """Whether the module's forward calls RWKV's WKV recurrence (transformers' `rwkv_linear_attention`,
    which runs the WKV CUDA kernel in training on a GPU): RWKV's time mixing."""
    return _runs(module, "wkv")


def runs_rg_lru(module: nn.Module) -> bool:
    """Whether the module's forward calls an RG-LRU's linear recurrence, a method of its own
    (`_rnn_scan`: recurrent_gemma's loop over the tokens, which training runs on a GPU too)."""
    return _runs(module, "rglru")


def uses_attention_interface(module: nn.Module) -> bool:
    """Whether the module's forward dispatches through transformers' attention interface."""
    return "ALL_ATTENTION_FUNCTIONS" in forward_names(type(module))


def is_learned_query_attention(module: nn.Module) -> bool:
    """An attention over something other than the sequence, with learned queries: a module that
    dispatches through the attention interface, holds parameters of its own (the queries) and no
    projection (inkling2's block attention residuals: per token, one learned query over the
    block states stored down the stack's depth). No flash kernel stands for it (docs/census.md,
    "Attention run as written")."""
    return (
        uses_attention_interface(module)
        and any(True for _ in module.parameters(recurse=False))
        and not any(is_projection(m) for m in module.modules())
    )


def attention_blocks(layer: nn.Module) -> frozenset[str]:
    """The layer's top-level children that run attention inside a block of their own beside a
    state-space mixer in another child: some module under the child dispatches through the
    attention interface and the child holds projections outside that module (zamba2's
    `shared_transformer`: attention and an MLP, each with adapters, on the hidden states
    concatenated with the embeddings). The census treats such a block's own children as the
    layer's children (part_of): its attention is a mixer, its MLP the feed-forward."""
    children = dict(layer.named_children())
    if not any(holds_scan(child) for child in children.values()):
        return frozenset()
    blocks = set()
    for top, child in children.items():
        if holds_scan(child):
            continue
        inner = [name for name, m in child.named_modules() if name and uses_attention_interface(m)]
        outside = [
            name for name, m in child.named_modules()
            if is_projection(m) and not any(name == a or name.startswith(a + ".") for a in inner)
        ]  # fmt: skip
        if inner and outside:
            blocks.add(top)
    return frozenset(blocks)


def part_blocks(layer: nn.Module) -> frozenset[str]:
    """The layer's children whose own children are its parts (part_of, layer_parts): its
    attention blocks, and its containers (a ModuleList or ModuleDict runs no forward of its
    own: longcat_flash's `self_attn` holds its two attentions, `mlps` its two MLPs,
    `input_layernorm` its two norms, each a part of the layer as a plain child would be)."""
    containers = {name for name, child in layer.named_children() if isinstance(child, (nn.ModuleList, nn.ModuleDict))}
    return attention_blocks(layer) | containers


def part_of(path: str, blocks: frozenset[str]) -> str:
    """The layer's child a module path belongs to: its top-level child, or, inside an attention
    block or a container (part_blocks), the block's child ("shared_transformer.self_attn",
    "self_attn.0")."""
    parts = path.split(".", 2)
    return ".".join(parts[:2]) if parts[0] in blocks and len(parts) > 1 else parts[0]


def layer_parts(layer: nn.Module, blocks: frozenset[str]) -> list[tuple[str, nn.Module]]:
    """(path, module) of the layer's children, each attention block replaced by its own children."""
    out = []
    for name, child in layer.named_children():
        if name in blocks:
            out.extend((f"{name}.{n}", c) for n, c in child.named_children())
        else:
            out.append((name, child))
    return out


def is_low_rank_pair(module: nn.Module) -> bool:
    """A low-rank adapter: a module whose only children are two projections in turn, down to a
    rank narrower than both the input and the output, then up (zamba2's per-layer adapters
    beside its shared block's projections, added to their outputs)."""
    children = list(module.children())
    if len(children) != 2 or not all(is_projection(c) for c in children) or any(True for _ in module.parameters(recurse=False)):
        return False
    down, up = (c.weight.shape for c in children)
    rank = int(down[0])
    return int(up[1]) == rank and rank < int(down[1]) and rank < int(up[0])
