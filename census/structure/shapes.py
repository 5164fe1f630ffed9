"""Layers into distinct shapes, and the stack as run-length groups of kinds (docs/census.md,
"How a config becomes a spec", step 3).

Each decoder layer gets a signature: its class, its mixer flavour (linear when a gated delta
rule runs, full when transformers' attention interface does, `eager` when its code calls neither
and what runs decides), its ffn flavour (moe when it holds routed experts: the experts interface, or stacked experts
beside a router) and its parameters' paths, shapes and dtypes. Equal signatures are one distinct
shape. A shape whose layers the config's per-layer lists tell apart is split into candidates,
one probed each, and merged back where their bytes agree (split_by_layer_config,
merge_alike); census/structure/kinds.py names each final shape's kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from speccat.census.structure.predicates import attention_blocks, holds_scan, is_experts, is_experts_interface, is_projection, is_state_space_mixer, mark_stacked_experts, runs_delta_rule, runs_selective_scan, runs_short_conv, runs_rg_lru, runs_ssd_scan, runs_wkv, uses_attention_interface
from speccat.census.spec import SpecError


@dataclass(eq=False)  # compared and hashed by identity: one object per distinct shape
class Shape:
    """One distinct layer shape: its flavours, signature and the layers that have it."""

    mixer: str  # "full", "cross", "linear", "mamba", "mamba2", "full_mamba", "full_mamba2", "short_conv", "rwkv", "rglru", "none", or "eager" until the probe settles it (then also "linear_eager", "linear_eager_gated")
    ffn: str  # "dense", "moe", or "none" (a mixer-only block)
    signature: tuple
    layers: list[int] = field(default_factory=list)
    block: bool = False  # its attention runs in a block of its own with an MLP, before its state-space mixer (predicates.attention_blocks: zamba2)
    reads_kv: bool = False  # its attention reads the keys and values an earlier layer stored (set from its probe: kv_shared)

    @property
    def first(self) -> int:
        return self.layers[0]

    def emptied(self) -> Shape:
        """A shape of the same facts with no layers yet: a candidate this one is split into, or
        the shape candidates are merged into."""
        return replace(self, layers=[])


def signature(index: int, layer: nn.Module) -> tuple:
    """(class, mixer flavour, ffn flavour, parameters' paths, shapes and dtypes), refusing layers
    no family prices: state-space mixers, experts that are neither the interface nor stacked
    beside a router (a list of expert MLPs). A cross-attention layer is told by what runs
    (census/census.py: the decoder skips it without encoder states).

    mixer is mamba when a selective scan runs (fused, or apart from its conv), mamba2 when the fused SSD scan does, linear
    when a gated delta rule runs, short_conv when a causal conv1d runs alone (LFM2), rwkv when
    RWKV's WKV recurrence does (its time mixing), rglru when an RG-LRU's does (recurrent_gemma's
    recurrent block), full when
    the attention interface does, `full_mamba` or `full_mamba2` when the attention interface
    and a scan run side by side (a hybrid: falcon_h1; or the attention in a block of its own with
    an MLP before the scan, zamba2's, marked `block` by classify), `eager` (decided by
    what runs: full attention, or `none` for a feed-forward-only block) otherwise; ffn is moe
    when the layer holds routed experts (stacked experts are marked first: classify), none when no child beside the mixer holds projections.
    """
    mixer, ffn, scan = "none", "dense", None
    scan_children, mixer_children = set(), set()
    nested_scan = holds_scan(layer)  # asked of each module below only when some module runs a scan
    for name, module in layer.named_modules():
        if not name:
            continue
        found = "mamba" if runs_selective_scan(module) else "mamba2" if runs_ssd_scan(module) else None
        if found is not None:
            if mixer not in ("none", "full"):
                raise SpecError(
                    "unsupported_layer",
                    f"layer {index} ({type(layer).__name__}): a {found} mixer ({name}) beside {mixer} attention in one layer; "
                    "the census prices a state-space mixer beside softmax attention only",
                )
            scan = found
            scan_children.add(name.split(".", 1)[0])
            continue
        if name.split(".", 1)[0] in scan_children or (nested_scan and holds_scan(module)):
            continue  # the scan runner's own modules, or a block around it (zamba2's mamba_decoder)
        if is_state_space_mixer(name, module):
            raise SpecError("unsupported_layer", f"layer {index} ({type(layer).__name__}) holds {name} ({type(module).__name__}): a state-space mixer no family prices")
        if is_experts(module):
            ffn = "moe"
        elif name.rsplit(".", 1)[-1] == "experts" and not any(is_experts(m) for m in module.modules()):
            raise SpecError("unsupported_layer", f"layer {index}: {name} is not built with transformers' experts interface, so it cannot run grouped_mm")
        if runs_delta_rule(module):
            if scan is not None:
                raise SpecError(
                    "unsupported_layer",
                    f"layer {index} ({type(layer).__name__}): linear attention ({name}) beside a {scan} mixer in one layer; "
                    "the census prices a state-space mixer beside softmax attention only",
                )
            mixer = "linear"
            mixer_children.add(name.split(".", 1)[0])
        elif mixer == "none" and scan is None and runs_short_conv(module):
            mixer = "short_conv"
            mixer_children.add(name.split(".", 1)[0])
        elif mixer == "none" and runs_wkv(module):
            mixer = "rwkv"
            mixer_children.add(name.split(".", 1)[0])
        elif mixer == "none" and runs_rg_lru(module):
            mixer = "rglru"
            mixer_children.add(name.split(".", 1)[0])
        elif mixer == "none" and uses_attention_interface(module):
            mixer = "full"
            mixer_children.add(name.split(".", 1)[0])
    mixer_children |= scan_children
    if mixer_children and ffn != "moe" and not any(
        n not in mixer_children and any(is_projection(m) or is_experts(m) for m in c.modules()) for n, c in layer.named_children()
    ):
        ffn = "none"  # a mixer-only block (Mamba, Mamba2, nemotron_h's attention blocks)
    if scan is not None and mixer == "full":
        mixer = f"full_{scan}"  # a hybrid: attention beside the state-space mixer, or before it in a block of its own (attention_blocks)
    elif scan is not None:
        mixer = scan
    if mixer == "none":
        mixer = "eager"  # no interface call in its code: its own attention, told by what runs (census/kernels/routing.py)
    params = tuple((name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters())
    return (type(layer).__name__, mixer, ffn, params)


def _built_alike(layer: nn.Module) -> tuple:
    """Every module's path and class, and every parameter's path, shape and dtype: all a
    signature reads. Layers equal in it have equal signatures and stacked-expert marks, so a
    stack of identical layers is looked at once."""
    modules = tuple((name, type(module)) for name, module in layer.named_modules())
    return modules, tuple((name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters())


def classify(layers: nn.ModuleList) -> list[tuple[int, Shape]]:
    """Each layer's index and its distinct shape (shared objects for equal signatures)."""
    shapes: dict[tuple, Shape] = {}
    seen: dict[tuple, tuple[tuple, dict[str, int]]] = {}  # _built_alike -> (signature, stacked-expert marks)
    stack = []
    for index, layer in enumerate(layers):
        alike = _built_alike(layer)
        if alike in seen:
            sig, marked = seen[alike]
            mark_stacked_experts(layer, marked)
        else:
            marked = mark_stacked_experts(layer)
            sig = signature(index, layer)
            seen[alike] = (sig, marked)
        shape = shapes.get(sig)
        if shape is None:
            shape = shapes[sig] = Shape(sig[1], sig[2], sig, block=bool(attention_blocks(layer)))
        shape.layers.append(index)
        stack.append((index, shape))
    return stack


def layer_groups(stack: list[tuple[int, Shape]], kind_of: dict[int, str]) -> list[dict]:
    """The layer stack as run-length groups of kinds: [{kind, count}, ...] in layer order."""
    groups: list[dict] = []
    for _, shape in stack:
        kind = kind_of[shape.first]
        if groups and groups[-1]["kind"] == kind:
            groups[-1]["count"] += 1
        else:
            groups.append({"kind": kind, "count": 1})
    return groups


def uses_experts_interface(layers: nn.ModuleList) -> bool:
    """Some layer holds experts built with transformers' experts interface (run with grouped_mm)."""
    return any(is_experts_interface(m) for layer in layers for m in layer.modules())


_SCALAR = (str, int, float, bool, type(None))


def layer_config_values(config: Any, total: int) -> list[tuple]:
    """Each layer's values of the config's per-layer lists, in stack order: every list as long as
    the stack of scalars (`layer_types`, llama4's `no_rope_layers`), and every list of layer
    indices (strictly increasing, each below the stack's length: llama4's `moe_layers`) read as
    whether the layer is one of them. Keys in sorted order, so a layer's values are one tuple."""
    values: list[list] = [[] for _ in range(total)]
    for key, value in sorted(vars(config).items()):  # as stored: a heterogeneous config refuses some reads
        if key.startswith("_") or not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, _SCALAR) for v in value):
            continue
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if ints and all(0 <= v < total for v in value) and all(a < b for a, b in zip(value, value[1:])):
            members = set(value)
            for i in range(total):
                values[i].append((key, i in members))
        elif len(value) == total:
            for i in range(total):
                values[i].append((key, value[i]))
    return [tuple(v) for v in values]


def split_by_layer_config(stack: list[tuple[int, Shape]], config: Any) -> list[tuple[int, Shape]]:
    """The stack with each distinct shape split by its layers' per-layer config values
    (layer_config_values): layers built alike that the config tells to run differently (llama4's
    NoPE layers) get a candidate shape of their own, to be probed apart. Candidates keep their
    shape's signature; a shape whose layers all share their values is kept as it is."""
    values = layer_config_values(config, len(stack))
    groups: dict[tuple[int, tuple], Shape] = {}
    out = []
    for index, shape in stack:
        key = (id(shape), values[index])
        part = groups.get(key)
        if part is None:
            part = groups[key] = shape.emptied()
        part.layers.append(index)
        out.append((index, part))
    return out


def split_each_layer(stack: list[tuple[int, Shape]]) -> list[tuple[int, Shape]]:
    """The stack with every layer a candidate shape of its own (its shape's signature kept): for
    layers whose place in the stack changes what they keep (census/measure/readers.py `with_earlier`),
    to be probed each at its place and merged back where they measured the same."""
    out = []
    for index, shape in stack:
        part = shape.emptied()
        part.layers.append(index)
        out.append((index, part))
    return out


def merge_alike(stack: list[tuple[int, Shape]], alike: Callable[[Shape, Shape], bool]) -> list[tuple[int, Shape]]:
    """Candidate shapes of one signature merged where `alike` says their probes measured the same,
    each into the first earlier candidate it matches (stack order of first layers)."""
    shapes = list(dict.fromkeys(shape for _, shape in stack))
    into: dict[int, Shape] = {}
    kept: list[Shape] = []
    for shape in shapes:
        target = next((k for k in kept if k.signature == shape.signature and alike(k, shape)), None)
        if target is None:
            kept.append(shape)
            into[id(shape)] = shape
        else:
            into[id(shape)] = target
    merged = {id(k): k.emptied() for k in kept}
    out = []
    for index, shape in stack:
        target = merged[id(into[id(shape)])]
        target.layers.append(index)
        out.append((index, target))
    return out
