"""One probed layer's modules sorted into roles (docs/census.md, "How a config becomes a spec",
step 5): which top-level children are the attention's (a kernel ran there), the feed-forward's
and the side branches' beside the MLP; the routed experts; a per-layer input gate; the MLP's own
projections; the kernels that ran, by kind; the norms on the hidden stream.

`LayerRoles` is the base every topic of a layer's facts builds on (census/describe/
attention_facts.py, mixer_facts.py, feed_forward_facts.py); census/describe/layer_view.py puts
them together as `LayerView`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from speccat.census.describe.layer_gate import LayerGate, find_layer_gate
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.structure.kernel_registry import KernelCall
from speccat.census.structure.predicates import (
    is_activation_region,
    is_experts,
    is_low_rank_pair,
    is_norm,
    is_projection,
    layer_parts,
    part_blocks,
    part_of,
    stacked_shapes,
)
from speccat.census.structure.shapes import Shape

# a linear attention run in torch: its decay a constant of the module, or computed from the tokens
LINEAR_EAGER = ("linear_eager", "linear_eager_gated")
# the half dtypes a cast to fp32 upcasts (a norm's, a router's input)
HALF = (torch.bfloat16, torch.float16)


def has_bias(module: nn.Module) -> bool:
    """The module holds a bias (a projection's or a norm's)."""
    return getattr(module, "bias", None) is not None


@dataclass
class LayerRoles:
    """One probed layer's modules sorted into roles, with what its probe saw."""

    index: int
    layer: nn.Module
    probe: LayerProbe
    shape: Shape
    hidden: int
    mixer_children: set[str] = field(init=False)  # top-level children where a kernel ran
    ffn_children: set[str] = field(init=False)  # other top-level children that ran, holding projections or experts (and see __post_init__)
    side_children: set[str] = field(init=False)  # feed-forward children beside the MLP (_side_children), split off ffn_children
    experts_path: str | None = field(init=False)  # the routed experts of the feed-forward (the first, for a group)
    experts_group: list[str] = field(init=False)  # every routed-experts module of the feed-forward (see __post_init__)
    gate: LayerGate | None = field(init=False)  # a per-layer input gate beside the MLP (census/describe/layer_gate.py)

    def __post_init__(self):
        self.blocks = part_blocks(self.layer)
        self.mixer_children = {k.child for k in self.probe.kernels if k.child}
        self.ffn_children, self.experts_path = set(), None
        # The feed-forward's routed experts: one module (the experts interface, llama4's stacked
        # experts), or stacked experts split by projection beside one router (jetmoe's MoE:
        # input_linear, output_linear), a group taken together. Routed experts inside the
        # attention (jetmoe's mixture of attention heads: routed q and o projections) are the
        # attention's: measured with it, no part of the feed-forward.
        self.experts_group = [
            name for name, module in self.layer.named_modules() if name and name.split(".", 1)[0] not in self.mixer_children and is_experts(module)
        ]
        if self.experts_group:
            self.experts_path = self.experts_group[0]
        ran = self.probe.children_ran
        for name, child in self.children():
            if (
                name in ran
                and name not in self.mixer_children
                and not is_norm(child)
                and any(is_projection(m) or is_experts(m) for m in child.modules())
            ):
                self.ffn_children.add(name)
        # A feed-forward written in the layer's own forward (bart's fc1, activation_fn, fc2: its
        # projections are the layer's children, not an MLP's): the activation children that ran
        # are the feed-forward's too, so their calls are its ffAct.
        if any(is_projection(self.module(name)) for name in self.ffn_children):
            self.ffn_children |= {
                name for name, child in self.children() if name in ran and name not in self.mixer_children and is_activation_region(child)
            }
        self.gate = find_layer_gate(self.layer, self.probe, self.ffn_children, self.hidden)
        self.side_children = self._side_children()
        self.ffn_children -= self.side_children

    def _side_children(self) -> set[str]:
        """Side branches beside the dense MLP: where the feed-forward children's projections back
        to the hidden size read different widths and one top-level child holds all of the widest
        (the MLP), every other feed-forward child but a per-layer input gate's (census/describe/layer_gate.py)
        and the activations (gemma3n's Laurel low-rank residual, AltUp's coefficient projections). They are no part of the
        MLP: not its width, not its matmuls; what they keep is measured and booked as `other`,
        which the records do not price. Empty when the widths agree, or when the widest shares
        its child with another width (then FeedForwardFacts.one_dense_width refuses the layer)."""
        if self.experts_path:
            return set()
        back = self.back_widths()
        if len(set(back.values())) <= 1:
            return set()
        widest = max(back.values())
        main = {self.part(path) for path, width in back.items() if width == widest}
        if len(main) > 1 or any(self.part(path) in main and width != widest for path, width in back.items()):
            return set()
        gate = {self.part(path) for path in self.gate.paths} if self.gate else set()
        return {name for name in self.ffn_children - main - gate if not is_activation_region(self.module(name))}

    def back_widths(self) -> dict[str, int]:
        """The feed-forward's projections back to the hidden size (output and per-layer input gates aside) -> the width each reads."""
        return {path: int(m.weight.shape[1]) for path, m in self.dense_projections() if m.weight.shape[0] == self.hidden}

    # -- where a module is -------------------------------------------------------------------

    def module(self, path: str) -> nn.Module:
        return self.layer.get_submodule(path)

    def children(self) -> list[tuple[str, nn.Module]]:
        """The layer's children, an attention block's own children in its place (predicates.layer_parts)."""
        return layer_parts(self.layer, self.blocks)

    def part(self, path: str) -> str:
        """The child (of children()) a module path belongs to."""
        return part_of(path, self.blocks)

    def named(self, child_set: set[str]):
        """(path, module) of every module under the given top-level children."""
        for name, module in self.layer.named_modules():
            if name and self.part(name) in child_set:
                yield name, module

    # -- the routed experts ------------------------------------------------------------------

    @property
    def experts(self) -> nn.Module | None:
        return self.module(self.experts_path) if self.experts_path else None

    @property
    def experts_owner(self) -> str | None:
        """Where the experts' activation belongs: inside the experts module, or for a group, in
        the block that holds it (jetmoe's activation between its two stacked projections)."""
        if len(self.experts_group) > 1:
            return self.experts_path.rsplit(".", 1)[0] if "." in self.experts_path else ""
        return self.experts_path

    def experts_weights(self) -> list[tuple[int, int, int]]:
        """(experts, rows, columns) of the routed experts' weights (every module of a group), in
        module order (predicates.stacked_shapes)."""
        return [shape for path in self.experts_group for shape in stacked_shapes(self.module(path))]

    def in_experts(self, name: str) -> bool:
        return any(name.startswith(path + ".") for path in self.experts_group)

    @property
    def moe_block(self) -> str | None:
        return self.experts_path.split(".", 1)[0] if self.experts_path else None

    # -- the kernels that ran, by kind -------------------------------------------------------

    def attention_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "attention"]

    def delta_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "delta_rule"]

    def scan_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "scan"]

    def ssd_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "ssd"]

    def linear_eager_kernels(self) -> list[KernelCall]:
        """The linear attentions run in torch (census/kernels/routing.py), one per module that ran one, of a
        layer whose mixer is one (a layer that also called the attention interface is not)."""
        return [k for k in self.probe.kernels if k.kind == "linear_eager"] if self.shape.mixer in ("eager", *LINEAR_EAGER) else []

    def conv_kernels(self) -> list[KernelCall]:
        """The causal conv1d calls of a short-convolution mixer (a linear-attention layer's conv is part of its recurrence)."""
        return [k for k in self.probe.kernels if k.kind == "conv"] if self.shape.mixer == "short_conv" else []

    def wkv_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "wkv"]

    def rglru_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "rglru"]

    # -- the MLP and its projections ---------------------------------------------------------

    def is_mlp(self, path: str) -> bool:
        """The module at `path` is an MLP: projections and an activation that ran, no other module
        with parameters, no attention class."""
        module = self.module(path)
        leaves = [m for m in module.modules() if not any(True for _ in m.children()) and any(True for _ in m.parameters(recurse=False))]
        ran_activation = any(owner == path or owner.startswith(path + ".") for owner in self.probe.activations)
        return "Attention" not in type(module).__name__ and ran_activation and all(is_projection(m) for m in leaves)

    def projection_reads(self, children: set[str]) -> set[int]:
        """The storages the projections of these top-level children were called with."""
        return {key for child in children for key in self.probe.projection_inputs.get(child, ())}

    def out_gates(self) -> set[str]:
        """The dense feed-forward's output gates: projections of the hidden width to itself whose
        output an inline sigmoid read, and whose products with it no projection of the
        feed-forward read (RWKV's channel-mixing receptance, whose sigmoid multiplies the MLP's
        output; a GLU's sigmoid gate feeds the down projection). They are no part of the MLP:
        not its width, not its matmuls."""
        if self.experts_path:
            return set()
        reads = self.projection_reads(self.ffn_children)
        return {
            path
            for path, products in self.probe.sigmoid_gates.items()
            if self.part(path) in self.ffn_children
            and tuple(self.module(path).weight.shape) == (self.hidden, self.hidden)
            and products
            and not products & reads
        }

    def not_mlp(self) -> set[str]:
        """The feed-forward's projections that are no part of its MLP: its output gates, a
        per-layer input gate's (census/describe/layer_gate.py) and low-rank adapters' (zamba2's beside
        gate_up_proj: not the MLP's width nor its matmuls; what they keep is the MLP's child's)."""
        return self.out_gates() | (set(self.gate.paths) if self.gate else set()) | self.adapters(self.ffn_children)

    def adapters(self, children: set[str]) -> set[str]:
        """The projections of low-rank adapters (predicates.is_low_rank_pair) under these children."""
        return {f"{path}.{n}" for path, m in self.named(children) if is_low_rank_pair(m) for n, _ in m.named_children()}

    def adapter_ranks_ran(self, children: set[str]) -> int:
        """The summed ranks of the low-rank adapters under these children whose projections ran
        (the probe's projection calls): zamba2's shared block holds every hybrid layer's adapters
        and runs the layer's own. Each adapter's second projection keeps its rank-wide input."""
        called = {path for paths in self.probe.projection_order.values() for path in paths}
        ups = [(f"{path}.{name}", up) for path, m in self.named(children) if is_low_rank_pair(m) for name, up in list(m.named_children())[1:]]
        return sum(int(up.weight.shape[1]) for path, up in ups if path in called)

    def dense_projections(self):
        """(path, module) of the dense MLP's projections."""
        outside = self.not_mlp()
        return [(path, m) for path, m in self.named(self.ffn_children) if is_projection(m) and path not in outside]

    # -- the norms on the hidden stream ------------------------------------------------------

    def first_call_norms(self) -> list[tuple[str, int]]:
        """The stream norm calls of the layer's first call with grad (census/measure/layer_probe.py
        `stream_norms`, split where each call began: `call_norm_starts`): one call's, which every
        other call ran too (LayerView.cycles: calls run alike, or later ones running more)."""
        each = self.probe.norms_by_call()
        return each[0] if each else list(self.probe.stream_norms)

    def stream_norm_paths(self) -> list[str]:
        """The norms the layer ran on its hidden stream in one call (`first_call_norms`), in call order."""
        return list(dict.fromkeys(path for path, _ in self.first_call_norms()))

    def layer_norm_modules(self) -> list[nn.Module]:
        return [self.module(path) for path in self.stream_norm_paths()]
