"""From the built modules and their layers' probes to the ModelSpec's facts (docs/census.md, "How
a config becomes a spec", step 5, "Dimensions and flags", "Parameters" and "Measured bytes").

Dimensions come from the kernels' inputs and the parameters' shapes; op counts from what ran;
parameters by part from the module tree; measured bytes from the saved-tensor accounting.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from speccat.catalogue.vocabulary import OPS, OTHER, UNPRICED_OPS
from speccat.census.build.model import Built
from speccat.census.describe.counts import FIXED_COUNTS
from speccat.census.describe.layer_gate import LayerGate, find_layer_gate
from speccat.census.measure.expert_counts import even_counts
from speccat.census.structure.predicates import QK_NORM_NAME, is_low_rank_pair, layer_parts, part_blocks, part_of, expert_candidates, expert_count, expert_width, experts_bias, is_activation_region, is_experts, is_experts_interface, is_layer_norm, is_norm, is_projection
from speccat.census.measure.probe import KernelCall, LayerProbe
from speccat.census.structure.shapes import Shape
from speccat.census.spec import SpecError

SHARED_NAME = re.compile(r"shared")  # shared_expert, shared_experts, shared_expert_gate

ATTENTION_OP = "speccat::flash_attention"
DELTA_RULE_OP = "speccat::chunk_gated_delta_rule"
KDA_OP = "speccat::chunk_kda"  # the delta rule gated per key channel (Kimi delta attention)
# The kernel each mixer flavour runs (a kind's measured `attention_impl`); feed-forward-only blocks run none.
MIXER_OPS = {
    "full": ATTENTION_OP,
    "cross": ATTENTION_OP,
    "linear": DELTA_RULE_OP,
    "mamba": "speccat::mamba_inner",  # the scan apart from its conv: SCAN_APART_OP
    "mamba2": "speccat::mamba_split_conv1d_scan",
    "short_conv": "speccat::causal_conv1d",
    "rwkv": "speccat::wkv",
    "rglru": "speccat::rg_lru_scan",
    "linear_eager": "eager",  # torch code as written, no kernel stands in (census/kernels/routing.py)
    "linear_eager_gated": "eager",  # the same, its decay computed from the tokens (xLSTM's mLSTM)
    "none": "none",
}
# a linear attention run in torch: its decay a constant of the module, or computed from the tokens
LINEAR_EAGER = ("linear_eager", "linear_eager_gated")
SCAN_APART_OP = "speccat::selective_scan"
EAGER_OP = "eager"  # softmax attention run as the model's eager code (census/kernels/attention.py `_as_written`)
EXPERTS_IMPL = "grouped_mm"


def _bias(module: nn.Module) -> bool:
    return getattr(module, "bias", None) is not None


@dataclass
class LayerView:
    """One probed layer's modules sorted into roles, with what its probe saw."""

    index: int
    layer: nn.Module
    probe: LayerProbe
    shape: Shape
    hidden: int
    attention_children: set[str] = field(init=False)  # top-level children where a kernel ran
    ffn_children: set[str] = field(init=False)  # other top-level children that ran, holding projections or experts (and see __post_init__)
    side_children: set[str] = field(init=False)  # feed-forward children beside the MLP (_side_children), split off ffn_children
    experts_path: str | None = field(init=False)  # the routed experts of the feed-forward (the first, for a group)
    experts_group: list[str] = field(init=False)  # every routed-experts module of the feed-forward (see __post_init__)
    gate: LayerGate | None = field(init=False)  # a per-layer input gate beside the MLP (census/describe/layer_gate.py)

    def __post_init__(self):
        self.blocks = part_blocks(self.layer)
        self.attention_children = {k.child for k in self.probe.kernels if k.child}
        self.ffn_children, self.experts_path = set(), None
        # The feed-forward's routed experts: one module (the experts interface, llama4's stacked
        # experts), or stacked experts split by projection beside one router (jetmoe's MoE:
        # input_linear, output_linear), a group taken together. Routed experts inside the
        # attention (jetmoe's mixture of attention heads: routed q and o projections) are the
        # attention's: measured with it, no part of the feed-forward.
        self.experts_group = [
            name for name, module in self.layer.named_modules() if name and name.split(".", 1)[0] not in self.attention_children and is_experts(module)
        ]
        if self.experts_group:
            self.experts_path = self.experts_group[0]
        ran = self.probe.children_ran
        for name, child in self.children():
            if (
                name in ran
                and name not in self.attention_children
                and not is_norm(child)
                and any(is_projection(m) or is_experts(m) for m in child.modules())
            ):
                self.ffn_children.add(name)
        # A feed-forward written in the layer's own forward (bart's fc1, activation_fn, fc2: its
        # projections are the layer's children, not an MLP's): the activation children that ran
        # are the feed-forward's too, so their calls are its ffAct.
        if any(is_projection(self.module(name)) for name in self.ffn_children):
            self.ffn_children |= {
                name for name, child in self.children() if name in ran and name not in self.attention_children and is_activation_region(child)
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
        its child with another width (then _one_dense_width refuses the layer)."""
        if self.experts_path:
            return set()
        back = self._back_widths()
        if len(set(back.values())) <= 1:
            return set()
        widest = max(back.values())
        main = {self.part(path) for path, width in back.items() if width == widest}
        if len(main) > 1 or any(self.part(path) in main and width != widest for path, width in back.items()):
            return set()
        gate = {self.part(path) for path in self.gate.paths} if self.gate else set()
        return {name for name in self.ffn_children - main - gate if not is_activation_region(self.module(name))}

    def _back_widths(self) -> dict[str, int]:
        """The feed-forward's projections back to the hidden size (output and per-layer input gates aside) -> the width each reads."""
        return {path: int(m.weight.shape[1]) for path, m in self.dense_projections() if m.weight.shape[0] == self.hidden}

    def module(self, path: str) -> nn.Module:
        return self.layer.get_submodule(path)

    def children(self) -> list[tuple[str, nn.Module]]:
        """The layer's children, an attention block's own children in its place (predicates.layer_parts)."""
        return layer_parts(self.layer, self.blocks)

    def part(self, path: str) -> str:
        """The child (of children()) a module path belongs to."""
        return part_of(path, self.blocks)

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

    def experts_weights(self) -> list[nn.Parameter]:
        """The 3-D weights of the routed experts (every module of a group), in module order."""
        return [p for path in self.experts_group for p in self.module(path).parameters(recurse=False) if p.dim() == 3]

    def in_experts(self, name: str) -> bool:
        return any(name.startswith(path + ".") for path in self.experts_group)

    @property
    def moe_block(self) -> str | None:
        return self.experts_path.split(".", 1)[0] if self.experts_path else None

    def attention_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "attention"]

    def keys_appended_every(self) -> int:
        """Tokens per key the self-attention appends to the layer's own (one compressed entry per
        that many tokens: DeepSeek-V4's compressors), 0 when its keys are its tokens; refused when
        the appended keys are not one per a whole number of tokens (docs/census.md, "Appended keys")."""
        every = 0
        for k in self.attention_kernels():
            queries, extra = k.q[2], k.k[2] - k.q[2]
            if self.shape.attention == "cross" or extra == 0:
                continue
            if queries % extra:
                raise SpecError(
                    "unsupported_layer",
                    f"layer {self.index} ({type(self.layer).__name__}): its queries attend to {extra} keys appended to the layer's own "
                    f"{queries}, not one per a whole number of tokens, which the census does not price",
                )
            every = max(every, queries // extra)
        return every

    def delta_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "delta_rule"]

    def feed_forward_only(self) -> bool:
        """No kernel ran, and every child beside the norms is routed experts or an MLP: projections
        and an activation that ran, no other module with parameters, no attention class."""
        if self.probe.kernels:
            return False
        children = [(n, c) for n, c in self.layer.named_children() if not is_norm(c) and any(True for _ in c.parameters())]
        return bool(children) and all(any(is_experts(m) for m in c.modules()) or self._is_mlp(n) for n, c in children)

    def _is_mlp(self, path: str) -> bool:
        """The module at `path` is an MLP: projections and an activation that ran, no other module
        with parameters, no attention class."""
        module = self.module(path)
        leaves = [m for m in module.modules() if not any(True for _ in m.children()) and any(True for _ in m.parameters(recurse=False))]
        ran_activation = any(owner == path or owner.startswith(path + ".") for owner in self.probe.activations)
        return "Attention" not in type(module).__name__ and ran_activation and all(is_projection(m) for m in leaves)

    def scan_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "scan"]

    def mixer_op(self) -> str:
        """The kernel the layer's mixer ran (its measured `attention_impl`)."""
        mixers = self.shape.attention.split("_", 1) if self.shape.attention.startswith("full_") else [self.shape.attention]
        ops = [
            SCAN_APART_OP if mixer == "mamba" and self.scan_apart() else KDA_OP if self.delta_gate_channel_bytes()
            else EAGER_OP if mixer in ("full", "cross") and any(k.eager for k in self.attention_kernels()) else MIXER_OPS[mixer]
            for mixer in mixers
        ]
        return "+".join(ops)  # a hybrid's both: the attention kernel and the scan's

    def delta_gate_kept(self, dtype) -> int:
        """Tensors of a per-channel delta gate's shape (value heads, key dim) in `dtype` that the
        mixer's own code keeps outside the kernel: what its gate's chain of ops saves (Kimi's
        softplus written as exp, log and a where on the fp32 gate: three fp32 and one bool mask)."""
        kernels = [k for k in self.delta_kernels() if k.gate_channel_bytes]
        if not kernels:
            return 0
        tail = (kernels[0].v[2], kernels[0].k[3])
        return sum(n for (op, dims, kept), n in self.probe.kept_tails.items() if kept == dtype and dims == tail and op in {f"child:{c}" for c in self.attention_children})

    def _biased_kernel(self) -> KernelCall | None:
        return next((k for k in self.attention_kernels() if k.bias_bytes), None)

    def score_bias_source(self) -> int:
        """Bytes per query head and token of the table an attention's score bias is gathered
        from, which the gather keeps (inkling's relative logits: one per head and distance,
        rel_extent or the window wide): a gather in an attention child whose output is the
        kernel's (s, t) scores. 0 without a score bias."""
        kernel = self._biased_kernel()
        if kernel is None:
            return 0
        s, t, heads = kernel.q[2], kernel.k[2], kernel.q[1]
        sources = [
            (source, nbytes)
            for child, source, nbytes, out in self.probe.score_gathers
            if child in self.attention_children and tuple(out[-2:]) == (s, t) and len(source) == 4 and source[2] == s
        ]
        return sum(source[1] * source[3] * nbytes // heads for source, nbytes in sources)

    def score_bias_tables(self) -> int:
        """Bytes per (query, key) pair of the s × t tables an attention's own code keeps outside
        its kernel, one for the whole batch and every head (inkling's gather index, int64, and
        the masked_fill mask of distances outside the bias's extent, bool). 0 without a score bias."""
        kernel = self._biased_kernel()
        if kernel is None or kernel.q[2] != kernel.k[2]:
            return 0
        ops = {f"child:{c}" for c in self.attention_children}
        return sum(dtype.itemsize * n for (op, rows, dtype), n in self.probe.kept_square.items() if op in ops and rows == kernel.q[2])

    def beside_attention_convs(self, in_attention: bool) -> int:
        """Bytes per token of the inputs that causal conv1d calls keep in a layer whose only other
        kernel is attention (inkling's short convs, fp32): those in the attention kernel's child
        (`in_attention`: on k and v, inside the tensor-parallel region) or in the layer's other
        children (on the attention's and the MLP's outputs, the hidden stream). 0 in a layer
        whose mixer is the conv or runs a kernel of its own (its conv is priced with it)."""
        kinds = {k.kind for k in self.probe.kernels}
        if "attention" not in kinds or kinds - {"attention", "conv"}:
            return 0
        homes = {k.child for k in self.attention_kernels()}
        convs = [k for k in self.probe.kernels if k.kind == "conv" and (k.child in homes) == in_attention]
        return sum(k.q[1] * k.in_bytes for k in convs)

    def lowrank_width(self) -> int:
        """A linear-attention mixer's low-rank projections: the summed input widths of its
        projections that read neither the layer's hidden width nor the recurrence's output width
        (Kimi's forget and output gates, each a projection to the head width and one back up);
        their inputs are kept. 0 for other mixers."""
        delta = self.delta_kernels()
        if not delta:
            return 0
        out_width = delta[0].v[2] * delta[0].v[3]
        widths = [int(m.weight.shape[1]) for _, m in self.named(self.attention_children) if is_projection(m)]
        return sum(w for w in widths if w not in (self.hidden, out_width))

    def gated_norm_sigmoid(self) -> bool:
        """The attention's output norm multiplies by a sigmoid of its gate in fp32 (fla's
        FusedRMSNormGated as transformers writes Kimi delta attention's)."""
        import torch

        return any(
            op.name == "sigmoid" and op.out_dtype == torch.float32
            for path, seen in self.probe.norm_ops.items()
            if self.part(path) in self.attention_children
            for op in seen
        )

    def delta_gate_channel_bytes(self) -> int:
        """The element bytes of a delta rule's gate given per key channel (Kimi delta attention,
        whose kernel keeps the gate as given); 0 for a gate per head or no delta rule."""
        return max((k.gate_channel_bytes for k in self.delta_kernels()), default=0)

    def scan_heads(self) -> int:
        """The selective scans a Mamba mixer runs apart from its conv, one per Mamba head (zamba's
        two; jamba's one); check_probes refuses scans that differ in shape."""
        return sum(k.apart for k in self.scan_kernels())

    def scan_apart(self) -> bool:
        return any(k.apart for k in self.scan_kernels())

    def scan_norms(self) -> bool:
        """Norms ran inside the mixer of a scan run apart (jamba's on dt, B and C), not on the
        hidden stream (the input norm of a Mamba layer nested in a hybrid: zamba's)."""
        children = {k.child for k in self.scan_kernels() if k.apart and k.child}
        stream = set(self.stream_norm_paths())
        return any("." in path and self.part(path) in children and path not in stream for path in self.probe.norm_ops)

    def scan_dt_rank(self, scan: KernelCall) -> int:
        """The dt rank: the fused kernel's dt projection weight is (inner, rank); a scan run apart is
        not handed it, so it is the x projection's width (the narrowest projection of the inner
        width: rank + 2·state) less B and C. A mixer scanning per Mamba head (zamba's) projects
        each head with its own weight, one 3-D parameter (heads, rank + 2·state, head's inner)."""
        if scan.v:
            return int(scan.v[1])
        inner, state = scan.k
        heads = self.scan_heads()
        widths = [m.weight.shape[0] for _, m in self.named({scan.child}) if is_projection(m) and m.weight.shape[1] == inner]
        if heads > 1:
            widths += [p.shape[1] for n, p in self.layer.named_parameters() if self.part(n) == scan.child and p.dim() == 3 and (p.shape[0], p.shape[2]) == (heads, inner)]
        rank = min(widths, default=0) - 2 * state
        if rank <= 0:
            raise SpecError("unsupported_layer", f"layer {self.index}: no x projection of the inner width {inner} gives the selective scan's dt rank")
        return int(rank)

    def ssd_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "ssd"]

    def linear_eager_kernels(self) -> list[KernelCall]:
        """The linear attentions run in torch (census/kernels/routing.py), one per module that ran one, of a
        layer whose mixer is one (a layer that also called the attention interface is not)."""
        return [k for k in self.probe.kernels if k.kind == "linear_eager"] if self.shape.attention in ("eager", *LINEAR_EAGER) else []

    def linear_eager_variants(self) -> dict[str, bool | int]:
        """What a linear attention run in torch does around its blocks, read off what ran in its
        child: activation calls on its inputs, a sigmoid gate of the heads' width on its output,
        norm calls (its output norm); 0 for every other mixer."""
        calls = self.linear_eager_kernels()
        children = {k.child for k in calls if k.child}
        width = calls[0].q[1] * calls[0].v[-1] if calls else 0
        inside = lambda path: self.part(path) in children  # noqa: E731
        return {
            "mixer_act": sum(n for owner, n in self.probe.activations.items() if inside(owner)),
            "mixer_out_gate": any(op.name == "sigmoid" and op.out_last == width for c in children for op in self.probe.router_ops.get(c, [])),
            "mixer_out_norms": sum(n for path, n in self.probe.norm_calls.items() if "." in path and inside(path)),
        }

    def conv_kernels(self) -> list[KernelCall]:
        """The causal conv1d calls of a short-convolution mixer (a linear-attention layer's conv is part of its recurrence)."""
        return [k for k in self.probe.kernels if k.kind == "conv"] if self.shape.attention == "short_conv" else []

    def wkv_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "wkv"]

    def rglru_kernels(self) -> list[KernelCall]:
        return [k for k in self.probe.kernels if k.kind == "rglru"]

    def scan_projections(self) -> int:
        """The projections of the children a scan, short conv, WKV or linear attention run in torch
        ran in (in, x, dt and out for Mamba; in and out for Mamba2 and a short conv; key, value,
        receptance and output for RWKV; x, y and out for an RG-LRU block)."""
        children = {k.child for k in self.scan_kernels() + self.ssd_kernels() + self.conv_kernels() + self.wkv_kernels() + self.rglru_kernels() + self.linear_eager_kernels() if k.child}
        return sum(1 for _, m in self.named(children) if is_projection(m))

    def named(self, child_set: set[str]):
        """(path, module) of every module under the given top-level children."""
        for name, module in self.layer.named_modules():
            if name and self.part(name) in child_set:
                yield name, module

    # -- ffn ---------------------------------------------------------------------------------

    def shared_children(self) -> list[tuple[str, nn.Module]]:
        """The MoE's shared experts: the MoE block's children named shared, and an MLP that is the
        layer's own child beside the MoE block and reads the MoE's input (granitemoehybrid's and
        granitemoeshared's `shared_mlp`): it runs on every token as a shared expert does. An MLP
        fed another input (longcat_flash's dense MLPs, one per sublayer) is not one."""
        block = self.moe_block
        if block is None:
            return []
        inside = [(f"{block}.{n}", m) for n, m in self.module(block).named_children() if SHARED_NAME.search(n)]
        moe_input = self._projection_reads({block})
        beside = [
            (name, self.module(name)) for name in sorted(self.ffn_children - {block}) if self._is_mlp(name) and self._projection_reads({name}) & moe_input
        ]
        return inside + beside

    def _width_back_to_hidden(self, paths: list[str]) -> int | None:
        """The input width of the last projection (in call order) whose output is the hidden size."""
        width = None
        for path in paths:
            weight = self.module(path).weight
            if weight.shape[0] == self.hidden:
                width = int(weight.shape[1])
        return width

    def out_gates(self) -> set[str]:
        """The dense feed-forward's output gates: projections of the hidden width to itself whose
        output an inline sigmoid read, and whose products with it no projection of the
        feed-forward read (RWKV's channel-mixing receptance, whose sigmoid multiplies the MLP's
        output; a GLU's sigmoid gate feeds the down projection). They are no part of the MLP:
        not its width, not its matmuls."""
        if self.experts_path:
            return set()
        reads = self._projection_reads(self.ffn_children)
        return {
            path
            for path, products in self.probe.sigmoid_gates.items()
            if self.part(path) in self.ffn_children
            and tuple(self.module(path).weight.shape) == (self.hidden, self.hidden)
            and products
            and not products & reads
        }

    def dense_width(self) -> int | None:
        if self.experts_path:
            return None
        paths = [p for child, called in self.probe.projection_order.items() if child in self.ffn_children for p in called]  # in call order
        return self._width_back_to_hidden([p for p in paths if p not in self.not_mlp()])

    def not_mlp(self) -> set[str]:
        """The feed-forward's projections that are no part of its MLP: its output gates, a
        per-layer input gate's (census/describe/layer_gate.py) and low-rank adapters' (zamba2's beside
        gate_up_proj: not the MLP's width nor its matmuls; what they keep is the MLP's child's)."""
        return self.out_gates() | (set(self.gate.paths) if self.gate else set()) | self.adapters(self.ffn_children)

    def adapters(self, children: set[str]) -> set[str]:
        """The projections of low-rank adapters (predicates.is_low_rank_pair) under these children."""
        return {f"{path}.{n}" for path, m in self.named(children) if is_low_rank_pair(m) for n, _ in m.named_children()}

    def dense_projections(self):
        """(path, module) of the dense MLP's projections."""
        outside = self.not_mlp()
        return [(path, m) for path, m in self.named(self.ffn_children) if is_projection(m) and path not in outside]

    def _one_dense_width(self) -> None:
        """Refuse a dense feed-forward whose projections back to the hidden size read different
        widths: two feed-forwards side by side or in turn, which the records price as one (a
        per-layer input gate, census/describe/layer_gate.py, is told apart and is not one of them)."""
        back = self._back_widths()
        if len(set(back.values())) > 1:
            listed = ", ".join(f"{path} from {width}" for path, width in back.items())
            raise SpecError(
                "unsupported_layer",
                f"layer {self.index}: feed-forward projections back to the hidden size {self.hidden} from different widths ({listed}): "
                "a second feed-forward beside the first, which the census does not price",
            )

    def shared_widths(self) -> list[int]:
        widths = []
        for path, module in self.shared_children():
            projections = [n for n, m in module.named_modules() if is_projection(m)]
            width = self._width_back_to_hidden([f"{path}.{n}" if n else path for n in projections])
            if width is not None and width > 1 and any(True for _ in module.children()):
                widths.append(width)
        return widths

    def shared_gate(self) -> bool:
        return any(is_projection(m) and m.weight.shape[0] == 1 for _, m in self.shared_children())

    def expert_width(self) -> int | None:
        """One expert's width (predicates.expert_width); for a group of stacked projections, the
        width the last one (back to the hidden size) reads: its weight's size that is not the
        hidden size."""
        experts = self.experts
        if experts is None:
            return None
        if len(self.experts_group) > 1:
            last = self.experts_weights()[-1]
            return int(next(n for n in last.shape[1:] if n != self.hidden)) if self.hidden in last.shape[1:] else None
        return expert_width(experts, self.hidden)

    def router_candidates(self, router: list) -> int:
        """The candidates the router chooses among: the experts' (expert_candidates), or more
        where its top-k chose among more (experts of the interface that hold only the experts
        that compute, the router's other candidates handled outside them: longcat_flash's zero
        experts since transformers 5.25, which its MoE block passes on itself)."""
        return max([expert_candidates(self.experts)] + [op.in_last for op in router if op.name == "topk"])

    def experts_impl(self) -> str:
        """How the routed experts ran: grouped_mm (the experts interface), or their own code over
        every token (`dense`) or over the chosen slots (`stacked`)."""
        if self.experts is not None and is_experts_interface(self.experts):
            return EXPERTS_IMPL
        return "dense" if self.experts_dense() else "stacked"

    def top_k(self) -> int:
        """The experts each token goes to: the last dim of the index the experts are called with
        (the experts interface), else the k of the router's top-k (stacked experts, called with
        the token slots alone)."""
        if self.probe.experts_top_k:
            return self.probe.experts_top_k
        router = [op for child in self.ffn_children for op in self.probe.router_ops.get(child, [])]
        return next((op.out_last for op in router if op.name == "topk"), 0)

    def experts_dense(self) -> bool:
        """The routed experts ran over every token once per expert (llama4's dense dispatch: the
        scores scale a copy of the input per expert), not over the chosen slots: measured as the
        token slots they ran over per token."""
        experts = self.experts
        if experts is None or not self.probe.tokens:
            return False
        count = expert_count(experts)
        return self.probe.experts_rows[self.experts_path] == count * self.probe.tokens and count > self.top_k()

    def ff_matmuls(self) -> int:
        """The layer's feed-forward weights over one h×width projection's (one expert's for MoE)."""
        experts = self.experts
        if experts is not None:
            width = self.expert_width()
            weights = sum(p.numel() // int(p.shape[0]) for p in self.experts_weights())  # one expert's slice of each
        else:
            if self.shape.ffn == "none":
                return 0  # a mixer-only block (Mamba, Mamba2, an attention-only block): no feed-forward
            width = self.dense_width()
            self._one_dense_width()
            weights = sum(m.weight.numel() for _, m in self.dense_projections())
        if not width:
            raise SpecError("unsupported_layer", f"layer {self.index}: no feed-forward projection back to the hidden size {self.hidden}")
        count, rest = divmod(weights, self.hidden * width)
        if rest or not count:
            raise SpecError(
                "unsupported_layer",
                f"layer {self.index}: feed-forward weights {weights} are not a whole number of {self.hidden}x{width} projections",
            )
        return count

    def _projection_reads(self, children: set[str]) -> set[int]:
        """The storages the projections of these top-level children were called with."""
        return {key for child in children for key in self.probe.projection_inputs.get(child, ())}

    def ff_input_shared(self) -> bool:
        """The feed-forward's projections read a storage the attention's projections read too: one
        normalised input feeds both (a parallel block: phi, gpt-j, falcon), kept once."""
        return bool(self._projection_reads(self.attention_children) & self._projection_reads(self.ffn_children))

    def act_output_read(self) -> bool:
        """The dense MLP's activation keeps a storage its projections read: its own output, which
        the down projection keeps as the same storage (ReLU saves its result)."""
        return self.experts is None and bool(self.probe.act_kept & self._projection_reads(self.ffn_children))

    def activations(self) -> int:
        """Activation calls of one expert (MoE) or of the dense MLP. Stacked experts run one by
        one (a loop over the experts hit: longcat_flash's) call it once each expert that ran: a
        whole multiple of the experts that compute and get a slot at the census's assumed even
        loads (census/measure/expert_counts.py), over them."""
        if self.experts_path:
            calls = sum(n for owner, n in self.probe.activations.items() if owner == self.experts_owner)
            experts = self.experts
            if is_experts_interface(experts) or not self.probe.tokens:
                return calls
            loads = even_counts(self.probe.tokens * self.top_k(), expert_candidates(experts))
            ran = sum(1 for n in loads[: expert_count(experts)] if n)
            return calls // ran if ran > 1 and calls % ran == 0 else calls
        gate = self.gate.activations if self.gate else frozenset()
        return sum(n for owner, n in self.probe.activations.items() if self.part(owner) in self.ffn_children and owner not in gate)

    def dense_activation_saves(self) -> int:
        """Tensors the dense MLP's activation keeps for backward per call (0 without one): what
        its code is, counted, not its bytes (the records price them from the width and dtype).
        A per-layer input gate's activation calls count here too (its storages are ffAct's):
        the records price its activation as keeping as many per call. What an activation in the
        mixer keeps (the RG-LRU block's GELU on its y branch) is the mixer's, not counted here."""
        calls = self.activations()
        if self.experts is not None or not calls:
            return 0
        calls += sum(self.probe.activations[owner] for owner in self.gate.activations) if self.gate else 0
        mixers = sum(n for child, n in self.probe.mixer_act_kept.items() if child in self.attention_children)
        return (self.probe.saved_storages["ffAct"] - mixers) // calls

    # -- ops and bytes -----------------------------------------------------------------------

    def ops(self) -> dict[str, int]:
        attn, delta = len(self.attention_kernels()), len(self.delta_kernels())
        scan = len(self.scan_kernels()) + len(self.ssd_kernels()) + len(self.wkv_kernels()) + len(self.rglru_kernels()) + len(self.linear_eager_kernels())
        counts = {
            "attMM": 3 * (attn + delta) + len(self.probe.output_projections) + self.scan_projections(),
            "attBMM": 2 * attn,
            "ffMM": self.ff_matmuls(),
            "softmax": attn,
            "dropout": self.probe.dropouts,
            "normOp": len(self.probe.stream_norms),
            "headCast": attn,
            "ffAct": self.activations(),
            "linrec": delta + scan,
        }
        counts.update(FIXED_COUNTS)
        return {op: counts[op] for op in OPS}

    def bytes_per_token(self, seq_length: int) -> dict[str, float]:
        booked = Counter()
        for op, nbytes in self.probe.saved_bytes.items():
            if op.startswith("child:"):
                child = op.split(":", 1)[1]
                op = "attMM" if child in self.attention_children else "ffMM" if child in self.ffn_children else OTHER
            booked[op] += nbytes
        return {op: booked.get(op, 0) / seq_length for op in OPS + UNPRICED_OPS}

    # -- params ------------------------------------------------------------------------------

    def params(self, holders: Mapping[str, int] | None = None) -> dict[str, int]:
        """The layer's parameters by part. A parameter several layers of the stack hold (one
        module in each: zamba2's shared transformer block, with every layer's adapters in it)
        counts its share in each, its elements over `holders[name]` (the layers holding it:
        parameter_holders), so the whole model counts it once; each part is rounded down (the model's count is
        short by less than one parameter per part and such layer)."""
        parts = Counter({part: Fraction(0) for part in ("attention", "ffn_routed", "ffn_shared", "ffn_router", "ffn_dense", "norm", "other")})
        norm_paths = [n for n, m in self.layer.named_modules() if n and is_norm(m)]
        shared_paths = [path for path, _ in self.shared_children()]
        holders = holders or {}
        for name, param in self.layer.named_parameters():
            child = self.part(name)
            if any(name.startswith(p + ".") for p in norm_paths):
                part = "norm"
            elif child in self.attention_children:
                part = "attention"
            elif self.in_experts(name):
                part = "ffn_routed"
            elif any(name.startswith(p + ".") for p in shared_paths):
                part = "ffn_shared"
            elif child == self.moe_block:
                part = "ffn_router"
            elif child in self.ffn_children:
                part = "ffn_dense"
            else:
                part = "other"
            parts[part] += Fraction(param.numel(), holders.get(name, 1))
        return {part: int(n) for part, n in parts.items()}

    # -- flags -------------------------------------------------------------------------------

    def stream_norm_paths(self) -> list[str]:
        """The norms the layer ran on its hidden stream (census/measure/probe.py `stream_norms`), in call order."""
        return list(dict.fromkeys(path for path, _ in self.probe.stream_norms))

    def layer_norm_modules(self) -> list[nn.Module]:
        return [self.module(path) for path in self.stream_norm_paths()]

    def qk_norm(self) -> bool:
        """A norm of the queries or keys held by the attention module itself (q_norm, k_norm)."""
        return any(
            QK_NORM_NAME.match(n) and is_norm(m) for child in self.attention_children for n, m in self.module(child).named_children()
        )

    def qk_norm_per_head(self) -> bool:
        """QK-norm whose weight is one head wide: it normalises each head on its own."""
        kernels = self.attention_kernels()
        if not kernels:
            return False
        head_dim = kernels[0].q[3]
        return any(
            QK_NORM_NAME.match(n) and is_norm(m) and getattr(m, "weight", None) is not None and m.weight.shape[-1] == head_dim
            for child in self.attention_children
            for n, m in self.module(child).named_children()
        )

    def qk_norm_weightless(self) -> bool:
        """A norm with no parameters ran in the attention twice per attention kernel call (on q
        and on k) on rows one head wide, casting a half input to fp32 first (llama4's L2 norm of
        q and k): it keeps that fp32 copy and a statistic per head, and no weighted product.
        (gemma-4's weightless v_norm runs once per call, on v.)"""
        import torch

        kernels = self.attention_kernels()
        if not kernels:
            return False
        head_dim = kernels[0].q[3]
        for path, seen in self.probe.norm_ops.items():
            module = self.module(path)
            if self.part(path) not in self.attention_children or any(True for _ in module.parameters()):
                continue
            if self.probe.norm_calls[path] != 2 * len(kernels):
                continue
            upcast = any(op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in (torch.bfloat16, torch.float16) for op in seen)
            if upcast and any(op.out_last == head_dim for op in seen):
                return True
        return False

    def v_norm_weightless(self) -> bool:
        """A norm with no parameters in the attention whose output is the v an attention kernel
        was given (gemma-4's `v_norm`, RMS over each value head in fp32): it keeps the fp32 copy
        of v and statistics per head, and no weighted product."""
        return any(
            self.part(path) in self.attention_children
            and not any(True for _ in self.module(path).parameters())
            and bool(outputs & self.probe.value_storages)
            for path, outputs in self.probe.norm_outputs.items()
        )

    def qkv_bias(self) -> bool:
        outputs = set(self.probe.output_projections)
        children = {k.child for k in self.probe.kernels if k.child and k.kind in ("attention", "delta_rule")}  # a Mamba mixer or short conv has no q, k, v
        return any(is_projection(m) and _bias(m) for n, m in self.named(children) if n not in outputs)

    def o_bias(self) -> bool:
        return any(_bias(self.module(n)) for n in self.probe.output_projections)

    def mlp_bias(self) -> bool:
        if self.experts is not None and experts_bias(self.experts):
            return True
        dense = self.ffn_children if not self.experts_path else set()
        shared = [m for _, child in self.shared_children() for m in child.modules()]
        return any(is_projection(m) and _bias(m) for _, m in self.named(dense)) or any(is_projection(m) and _bias(m) for m in shared)

    def output_gate(self, heads: int, head_dim: int) -> bool:
        """The attention's output multiplied by a sigmoid gate of the heads' width: the gate made
        by q_proj beside the queries (twice heads × head_dim wide: Qwen3-Next), or a projection of
        its own in the attention whose output's sigmoid multiplies a tensor (afmoe's gate_proj)."""
        for child in self.attention_children:
            q_proj = getattr(self.module(child), "q_proj", None)
            if q_proj is not None and is_projection(q_proj) and q_proj.weight.shape[0] == 2 * heads * head_dim:
                return True
        return any(
            products and self.part(path) in self.attention_children and self.module(path).weight.shape[0] == heads * head_dim
            for path, products in self.probe.sigmoid_gates.items()
        )

    def mla(self) -> dict[str, int]:
        """MLA latent ranks from kv_b_proj, kv_a_proj_with_mqa and q_a_proj (absent when not MLA)."""
        for child in self.attention_children:
            attn = self.module(child)
            kv_b, kv_a = getattr(attn, "kv_b_proj", None), getattr(attn, "kv_a_proj_with_mqa", None)
            if kv_b is None or kv_a is None:
                continue
            dims = {"kv_lora_rank": int(kv_b.weight.shape[1])}
            dims["qk_rope_head_dim"] = int(kv_a.weight.shape[0]) - dims["kv_lora_rank"]
            q_a = getattr(attn, "q_a_proj", None)
            if q_a is not None:
                dims["q_lora_rank"] = int(q_a.weight.shape[0])
            return dims
        return {}

    # -- variants ----------------------------------------------------------------------------

    def variants(self, num_experts_per_tok: int | None) -> dict[str, bool | int]:
        """The kind's variant facts (catalogue/vocabulary.yaml `variants`), read off what ran."""
        import torch

        half = (torch.bfloat16, torch.float16)
        norms = self.stream_norm_paths()
        ops = self.probe.norm_ops.get(norms[0], []) if norms else []
        upcast = any(op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in half for op in ops)
        muls = [op for op in ops if op.name == "mul"]
        kernels = self.attention_kernels()
        router = [op for child in self.ffn_children for op in self.probe.router_ops.get(child, [])]
        experts = self.experts
        n_exp = self.router_candidates(router) if experts is not None else -1  # the router scores every candidate, zero experts too
        dense = self.dense_width()
        return {
            "norm_upcast": upcast,
            "norm_scale_fp32": upcast and bool(muls) and muls[-1].out_dtype == torch.float32,
            "norm_weight_copy": bool(norms) and norms[0] in self.probe.norm_weight_copies,
            "norm_inputs_shared": len(self.probe.stream_norms) - len({key for _, key in self.probe.stream_norms}),
            "q_heads_major": any(k.heads_major for k in kernels),
            "v_in_projection": not self.mla() and any(k.v_is_view for k in kernels),
            "qk_in_projection": not self.mla() and any(k.v_is_view and k.qk_share_v for k in kernels),
            "index_topk": max((k.index_topk for k in kernels), default=0),
            "keys_appended_every": self.keys_appended_every(),
            "kv_same": any(k.kv_same for k in kernels),
            "kv_shared": any(k.kv_borrowed for k in kernels),
            "attention_dropout": any(k.dropout > 0 for k in kernels),
            "score_bias_bytes": max((k.bias_bytes for k in kernels), default=0),
            "score_bias_source": self.score_bias_source(),
            "score_bias_tables": self.score_bias_tables(),
            "attention_conv_bytes": self.beside_attention_convs(in_attention=True),
            "stream_conv_bytes": self.beside_attention_convs(in_attention=False),
            "ff_input_shared": self.ff_input_shared(),
            "ff_fused_gate_up": bool(dense) and any(m.weight.shape[0] == 2 * dense for _, m in self.dense_projections()),
            "act_inline": experts is not None and any(getattr(m, "_speccat_activation", False) for m in experts.modules()),
            "act_saved": self.dense_activation_saves(),
            "act_output_read": self.act_output_read(),
            "router_fp32_input": any(
                op.name == "_to_copy" and op.out_dtype == torch.float32 and op.in_dtype in half and op.out_last == self.hidden for op in router
            ),
            "router_scores_all": any(op.name in ("softmax", "_softmax", "sigmoid") and op.out_last == n_exp for op in router),
            "router_renorm": num_experts_per_tok is not None and any(op.name in ("div", "div_") and op.out_last == num_experts_per_tok for op in router),
            "routing_weights_fp32": self.probe.routing_weights_dtype == torch.float32,
            "experts_dense": self.experts_dense(),
            "qk_norm_per_head": self.qk_norm_per_head(),
            "qk_norm_weightless": self.qk_norm_weightless(),
            "scan_apart": self.scan_apart(),
            "scan_norms": self.scan_norms(),
            "delta_gate_channel_bytes": self.delta_gate_channel_bytes(),
            "delta_gate_fp32": self.delta_gate_kept(torch.float32),
            "delta_gate_masks": self.delta_gate_kept(torch.bool),
            "lowrank_width": self.lowrank_width(),
            "per_layer_gate_width": self.gate.width if self.gate else 0,
            "v_norm_weightless": self.v_norm_weightless(),
            "gated_norm_sigmoid": self.gated_norm_sigmoid(),
            **self.linear_eager_variants(),
            "gated_norm": any(
                op.name == "silu" for path, seen in self.probe.norm_ops.items() if self.part(path) in self.attention_children for op in seen
            ),
            "token_mixes": sum(n for child, n in self.probe.token_mixes.items() if child in self.attention_children),
            "ff_token_mixes": sum(n for child, n in self.probe.token_mixes.items() if child in self.ffn_children),
            "ff_out_gate": bool(self.out_gates()),
        }

    def conv_kernel(self) -> int | None:
        for _, m in self.named(self.attention_children):
            if isinstance(m, nn.Conv1d):
                return int(m.kernel_size[0])
        return None


def parameter_holders(layers: nn.ModuleList) -> list[dict[str, int]]:
    """Per layer, its parameters' paths -> how many layers of the stack hold that parameter (the
    same tensor: 1 unless a module is shared between layers)."""
    count = Counter(id(p) for layer in layers for p in layer.parameters())
    return [{name: count[id(p)] for name, p in layer.named_parameters()} for layer in layers]


def _sliding_window(views: list[LayerView], layers: nn.ModuleList) -> int | None:
    windows = [k.window for v in views for k in v.attention_kernels() if k.window > 0]
    for layer in layers:
        for module in layer.modules():
            value = module.__dict__.get("sliding_window")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                windows.append(value)
    return max(windows) if windows else None


def _view_dims(view: LayerView) -> dict[str, int] | None:
    """One layer's attention dims (catalogue/vocabulary.yaml `kind_dims`) from its kernel calls and
    MLA projections; None for a layer that ran no attention kernel (a linear-attention layer)."""
    calls = view.attention_kernels()
    if not calls:
        return None
    first = calls[0]
    for call in calls[1:]:
        if (call.q[1:2] + call.q[3:], call.k[1:2] + call.k[3:], call.v[3:]) != (first.q[1:2] + first.q[3:], first.k[1:2] + first.k[3:], first.v[3:]):
            raise SpecError(
                "unsupported_layer",
                f"layer {view.index}: its attention calls differ in shape (q {first.q} vs {call.q}); one kind cannot state both",
            )
    dims = {"num_attention_heads": first.q[1], "num_key_value_heads": first.k[1], "head_dim": first.q[3]}
    if first.v[3] != first.q[3]:
        dims["v_head_dim"] = first.v[3]
    mla = view.mla()
    if mla:
        dims.update(mla)
        dims["qk_nope_head_dim"] = dims["head_dim"] - mla["qk_rope_head_dim"]
        dims.setdefault("v_head_dim", dims["head_dim"])
    return dims


def attention_dims(views: list[LayerView]) -> tuple[dict[str, int], dict[int, dict[str, int]]]:
    """(the model-wide attention dims: the first attention layer's, {probed layer index: its dims}
    for each layer whose attention differs in shape from them)."""
    dims = {v.index: d for v in views if (d := _view_dims(v)) is not None}
    if not dims:
        delta = next((k for v in views for k in v.delta_kernels()), None)
        # a stack of Mamba mixers has no heads: it states one (docs/census.md, "State-space mixers")
        return {"num_attention_heads": delta.v[2] if delta is not None else 1}, {}
    model_wide = next(iter(dims.values()))
    return model_wide, {index: d for index, d in dims.items() if d != model_wide}


def check_tokens(probes: Mapping[int, LayerProbe], seq_length: int) -> None:
    """Refuse a decoder that hands its layers another number of tokens than it was given
    (cpmant's prepends prompt tokens of its own, prophetnet's appends a stream per predicted
    token): the census states bytes per token of the sequence, measured at one sequence length."""
    for index, probe in probes.items():
        if probe.ran and probe.hidden_dims and seq_length not in probe.hidden_dims:
            raise SpecError(
                "unsupported_layer",
                f"layer {index}: its hidden states {probe.hidden_dims} (before the width) have no dim of the {seq_length} tokens the decoder is given: "
                "the decoder runs its layers over tokens of its own beside the sequence's (a prompt, n-gram streams), which bytes per token of the sequence do not state",
            )


def check_probes(views: list[LayerView]) -> None:
    """What the probes saw can refuse too: a layer that ran no kernel, non-causal or cross-attention."""
    for v in views:
        if not v.probe.kernels and v.shape.attention != "none":
            raise SpecError(
                "unsupported_layer",
                f"layer {v.index} ({type(v.layer).__name__}): ran no attention kernel on a plain causal input "
                "(a cross-attention layer skips without encoder states)",
            )
        if v.shape.attention.startswith("full_") and not (v.attention_kernels() and (v.scan_kernels() or v.ssd_kernels())):
            raise SpecError(
                "unsupported_layer",
                f"layer {v.index} ({type(v.layer).__name__}): holds attention beside a state-space mixer, but only one of them ran on a plain causal input",
            )
        if len({(k.child, k.q, k.k) for k in v.scan_kernels() if k.apart}) > 1:
            raise SpecError(
                "unsupported_layer",
                f"layer {v.index} ({type(v.layer).__name__}): selective scans of different shapes or in different children in one layer; "
                "the census states one Mamba mixer's scans, one per Mamba head alike",
            )
        for k in v.attention_kernels():
            # keys appended to the layer's own tokens, fewer than them (compressed entries), are
            # priced per token (keys_appended_every); any other difference is cross-attention
            appended = k.q[2] in v.probe.hidden_dims and 0 < k.k[2] - k.q[2] < k.q[2]
            if k.q[2] != k.k[2] and v.shape.attention != "cross" and not appended:  # bidirectional self-attention (a BERT built as a causal LM without is_decoder) keeps what causal does
                raise SpecError("unsupported_layer", f"layer {v.index} ({type(v.layer).__name__}): cross-attention (queries {k.q[2]}, keys {k.k[2]})")
        v.keys_appended_every()  # refuses appended keys that are not one per a whole number of tokens


def check_appended_keys(plain: LayerView, other: LayerView, length: int) -> None:
    """Refuse keys appended to the layer's own that do not scale with the sequence: `other` is
    the same layer probed at another length, which must append one key per as many tokens."""
    at_census, at_length = plain.keys_appended_every(), other.keys_appended_every()
    if at_census != at_length:
        raise SpecError(
            "unsupported_layer",
            f"layer {plain.index} ({type(plain.layer).__name__}): the keys appended to its own are one per {at_census} tokens at the census's "
            f"length and one per {at_length} at {length} tokens: they do not scale with the sequence, which bytes per token do not state",
        )


def model_facts(built: Built, views: list[LayerView], stack: list[tuple[int, Shape]]) -> dict[str, Any]:
    """The spec's dimensions and flags (everything but the structure); the attention dims are the
    first attention layer's (attention_dims gives the layers that differ)."""
    embedding = built.embedding.weight
    facts: dict[str, Any] = {
        "hidden_size": views[0].hidden,  # the layers' width (an embedding may be narrower and projected)
        "num_hidden_layers": len(built.layers),
        "vocab_size": int(embedding.shape[0]),
    }
    model_wide, differing = attention_dims(views)
    facts.update(model_wide)
    max_positions = getattr(built.config, "max_position_embeddings", None)
    if isinstance(max_positions, int) and max_positions > 0:
        facts["max_position_embeddings"] = max_positions
    dense = next((v for v in views if v.experts_path is None and v.shape.ffn != "none"), None)
    if dense is not None and dense.dense_width():
        facts["intermediate_size"] = dense.dense_width()
    moe = next((v for v in views if v.experts_path), None)
    if moe is not None:
        experts = moe.experts
        facts["num_experts"] = expert_count(experts)
        facts["moe_intermediate_size"] = moe.expert_width()
        top_k = moe.top_k()
        if not top_k:
            raise SpecError("unsupported_layer", f"layer {moe.index}: its experts were called with no index of the experts each token goes to, and its router chose none by top-k")
        facts["num_experts_per_tok"] = top_k
        shared = moe.shared_widths()
        if shared:
            total = sum(shared)
            facts["shared_expert_intermediate_size"] = total
            width = facts["moe_intermediate_size"]
            facts["num_shared_experts"] = total // width if total % width == 0 else len(shared)
        leading = next((i for i, shape in stack if shape.ffn == "moe"), 0)
        if leading and all(shape.ffn == "moe" for i, shape in stack if i >= leading):
            facts["first_k_dense_replace"] = leading
    linear = next((v for v in views if v.delta_kernels()), None)
    if linear is not None:
        delta = linear.delta_kernels()[0]
        facts["linear_num_key_heads"], facts["linear_key_head_dim"] = delta.k[2], delta.k[3]
        facts["linear_num_value_heads"], facts["linear_value_head_dim"] = delta.v[2], delta.v[3]
        conv = linear.conv_kernel()
        if conv:
            facts["linear_conv_kernel_dim"] = conv
    mamba = next((v for v in views if v.scan_kernels()), None)
    if mamba is not None:
        scan = mamba.scan_kernels()[0]
        heads = mamba.scan_heads()
        facts["ssm_inner_size"], facts["ssm_state_size"] = scan.k[0] * max(heads, 1), scan.k[1]
        if heads > 1:  # one scan per Mamba head, each over the head's share of the inner width
            facts["ssm_num_heads"] = heads
        facts["ssm_dt_rank"] = mamba.scan_dt_rank(scan)
        conv = mamba.conv_kernel()
        if conv:
            facts["ssm_conv_kernel"] = conv
    rwkv = next((v for v in views if v.wkv_kernels()), None)
    if rwkv is not None:
        facts["wkv_size"] = rwkv.wkv_kernels()[0].q[-1]
    lru = next((v for v in views if v.rglru_kernels()), None)
    if lru is not None:  # the RG-LRU's width (its recurrence's channels) and its block's depthwise conv width
        facts["lru_width"] = lru.rglru_kernels()[0].q[-1]
        conv = lru.conv_kernel()
        if conv:
            facts["lru_conv_kernel"] = conv
    eager = next((v for v in views if v.linear_eager_kernels()), None)
    if eager is not None:  # q of its first block (b, heads, block, head dim), or of every chunk (b, heads, chunks, block, head dim): the block is min(its size, s)
        q = eager.linear_eager_kernels()[0].q
        facts["linear_eager_heads"], facts["linear_eager_block"], facts["linear_eager_head_dim"] = q[1], q[-2], q[-1]
    short = next((v for v in views if v.conv_kernels()), None)
    if short is not None:
        facts["short_conv_kernel"] = short.conv_kernels()[0].k[-1]
    mamba2 = next((v for v in views if v.ssd_kernels()), None)
    if mamba2 is not None:
        ssd = mamba2.ssd_kernels()[0]
        facts["ssm_num_heads"], facts["ssm_head_dim"] = ssd.k
        facts["ssm_n_groups"], facts["ssm_state_size"] = ssd.v
        facts["ssm_inner_size"] = ssd.k[0] * ssd.k[1]
        conv = mamba2.conv_kernel()
        if conv:
            facts["ssm_conv_kernel"] = conv
    window = _sliding_window(views, built.layers)
    if window:
        facts["sliding_window"] = window
    full = [v for v in views if v.attention_kernels()]
    own = {v.index: differing.get(v.index, model_wide) for v in full}
    norms = [m for v in views for m in v.layer_norm_modules()]
    facts.update(
        qkv_bias=any(v.qkv_bias() for v in views),
        o_bias=any(v.o_bias() for v in views),
        mlp_bias=any(v.mlp_bias() for v in views),
        norm_bias=any(_bias(m) for m in norms),
        qk_norm=any(v.qk_norm() for v in full if v.shape.attention != "cross"),  # a cross kind's QK-norm: its qk_norm_per_head
        attn_output_gate=any(v.output_gate(own[v.index]["num_attention_heads"], own[v.index].get("head_dim", 0)) for v in full),
        shared_expert_gate=any(v.shared_gate() for v in views),
        tie_word_embeddings=built.tied,
        layer_norms=any(is_layer_norm(m) for m in norms),
    )
    return facts

