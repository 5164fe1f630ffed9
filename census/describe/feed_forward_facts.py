"""What a probed layer's feed-forward is: the dense MLP's width and matmuls, the MoE's shared
experts, routed experts (width, top-k, how they ran) and router, the activation calls and the
MLP's biases (docs/census.md, "Op counts", "Dimensions and flags"). The feed-forward's variant
facts are read in census/describe/variants_feed_forward.py.
"""

from __future__ import annotations

import re

from torch import nn

from speccat.census.describe.layer_roles import LayerRoles, has_bias
from speccat.census.measure.expert_counts import even_counts
from speccat.census.spec import SpecError
from speccat.census.structure.predicates import expert_candidates, expert_count, expert_width, experts_bias, is_experts_interface, is_projection

SHARED_NAME = re.compile(r"shared")  # shared_expert, shared_experts, shared_expert_gate
EXPERTS_IMPL = "grouped_mm"


class FeedForwardFacts(LayerRoles):
    """A layer's feed-forward facts (see the module's docstring)."""

    def shared_children(self) -> list[tuple[str, nn.Module]]:
        """The MoE's shared experts: the MoE block's children named shared, and an MLP that is the
        layer's own child beside the MoE block and reads the MoE's input (granitemoehybrid's and
        granitemoeshared's `shared_mlp`): it runs on every token as a shared expert does. An MLP
        fed another input (longcat_flash's dense MLPs, one per sublayer) is not one."""
        block = self.moe_block
        if block is None:
            return []
        inside = [(f"{block}.{n}", m) for n, m in self.module(block).named_children() if SHARED_NAME.search(n)]
        moe_input = self.projection_reads({block})
        beside = [
            (name, self.module(name)) for name in sorted(self.ffn_children - {block}) if self.is_mlp(name) and self.projection_reads({name}) & moe_input
        ]
        return inside + beside

    def dense_beside(self) -> list[str]:
        """The dense MLPs a layer with routed experts calls beside its MoE block: the layer's own
        children that are MLPs (is_mlp), other than the MoE block and its shared experts
        (shared_children: an MLP reading the MoE's input is one). longcat_flash's `mlps`, one
        per sublayer, each fed its own sublayer's norm. Empty without routed experts."""
        block = self.moe_block
        if block is None:
            return []
        shared = {path for path, _ in self.shared_children()}
        return [name for name in sorted(self.ffn_children - {block} - shared) if self.is_mlp(name)]

    def dense_beside_call_widths(self) -> list[int]:
        """The input width of each call the probe saw (its projection order, over every call of
        the layer that ran with grad) of those MLPs' projections back to the hidden size: one a
        call of an MLP, each reading the MLP's width."""
        called = [path for child in self.dense_beside() for path in self.probe.projection_order.get(child, [])]
        weights = [self.module(path).weight for path in called]
        return [int(w.shape[1]) for w in weights if int(w.shape[0]) == self.hidden]

    def width_back_to_hidden(self, paths: list[str]) -> int | None:
        """The input width of the last projection (in call order) whose output is the hidden size."""
        width = None
        for path in paths:
            weight = self.module(path).weight
            if weight.shape[0] == self.hidden:
                width = int(weight.shape[1])
        return width

    def dense_width(self) -> int | None:
        if self.experts_path:
            return None
        paths = [p for child, called in self.probe.projection_order.items() if child in self.ffn_children for p in called]  # in call order
        return self.width_back_to_hidden([p for p in paths if p not in self.not_mlp()])

    def one_dense_width(self) -> None:
        """Refuse a dense feed-forward whose projections back to the hidden size read different
        widths: two feed-forwards side by side or in turn, which the records price as one (a
        per-layer input gate, census/describe/layer_gate.py, is told apart and is not one of them)."""
        back = self.back_widths()
        if len(set(back.values())) > 1:
            listed = ", ".join(f"{path} from {width}" for path, width in back.items())
            raise SpecError(
                "unsupported_layer",
                f"layer {self.index}: feed-forward projections back to the hidden size {self.hidden} from different widths ({listed}): "
                "a second feed-forward beside the first, which the census does not price",
            )

    def shared_parts(self) -> list[tuple[int, int]]:
        """Each shared child's (total width, width of one row of what it saves): the input width
        of its last projection back to the hidden size, both; or, for a child holding its
        experts stacked in weights of its own (shared_stacked), experts × width and one
        expert's width (a batched matmul saves experts × tokens rows)."""
        parts = []
        for path, module in self.shared_children():
            projections = [n for n, m in module.named_modules() if is_projection(m)]
            width = self.width_back_to_hidden([f"{path}.{n}" if n else path for n in projections])
            if width is not None and width > 1 and any(True for _ in module.children()):
                parts.append((width, width))
            elif (stacked := self.shared_stacked(module)) is not None:
                parts.append((stacked[0] * stacked[1], stacked[1]))
        return parts

    def shared_widths(self) -> list[int]:
        return [total for total, _ in self.shared_parts()]

    def shared_stacked(self, module: nn.Module) -> tuple[int, int] | None:
        """(experts, one expert's width) of a shared child with no projections that holds its
        experts stacked in 3-D weights of its own, read off the weight back to the hidden size
        (experts, hidden, width): inkling's shared experts, run as batched matmuls; None for
        any other child."""
        if any(is_projection(m) for m in module.modules()):
            return None
        back = [p for p in module.parameters(recurse=False) if p.dim() == 3 and int(p.shape[1]) == self.hidden and int(p.shape[2]) > 1]
        return (int(back[-1].shape[0]), int(back[-1].shape[2])) if back else None

    def shared_gate(self) -> bool:
        return any(is_projection(m) and m.weight.shape[0] == 1 for _, m in self.shared_children())

    def latent_projections(self) -> tuple[list[str], list[str]]:
        """A latent MoE's projections (census/measure/expert_links.py): (those whose output the
        routed experts ran on, those that read what the experts returned), each a projection of
        the MoE block outside its experts and shared experts, down from the hidden size to the
        experts' input width and back up to it, where that width is not the hidden size
        (Nemotron-3-Super's fc1_latent_proj, 4096 → 1024, and fc2_latent_proj); ([], []) unless
        both ran."""
        width = self.probe.experts_input_widths.get(self.experts_path or "", self.hidden)
        if width == self.hidden:
            return [], []
        shared = [path for path, _ in self.shared_children()]

        def around(paths: set[str], shape: tuple[int, int]) -> list[str]:
            return sorted(
                p
                for p in paths
                if self.part(p) == self.moe_block
                and not self.in_experts(p)
                and not any(p == s or p.startswith(s + ".") for s in shared)
                and tuple(self.module(p).weight.shape) == shape
            )

        down, up = around(self.probe.experts_fed_by, (width, self.hidden)), around(self.probe.experts_read_by, (self.hidden, width))
        return (down, up) if down and up else ([], [])

    def moe_latent_width(self) -> int:
        """The width the routed experts run in between a latent MoE's projections
        (latent_projections); 0 for experts that run in the hidden size."""
        down, _ = self.latent_projections()
        return int(self.module(down[0]).weight.shape[0]) if down else 0

    def experts_input_width(self) -> int:
        """The width of the routed experts' input and output: a latent MoE's latent width, else
        the hidden size."""
        return self.moe_latent_width() or self.hidden

    def expert_width(self) -> int | None:
        """One expert's width (predicates.expert_width, read against the experts' input width:
        a latent MoE's experts map back to the latent width, not the hidden size); for a group of
        stacked projections, the width the last one (back to that width) reads: its weight's
        size that is not that width."""
        experts = self.experts
        if experts is None:
            return None
        across = self.experts_input_width()
        if len(self.experts_group) > 1:
            last = self.experts_weights()[-1]
            return next(n for n in last[1:] if n != across) if across in last[1:] else None
        return expert_width(experts, across)

    def router_ops(self) -> list:
        """The ops the probe saw in the feed-forward children's router regions (census/measure/layer_probe.py
        `router_ops`): the MoE block's own ops outside its experts and shared MLP."""
        return [op for child in self.ffn_children for op in self.probe.router_ops.get(child, [])]

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
        return next((op.out_last for op in self.router_ops() if op.name == "topk"), 0)

    def experts_dense(self) -> bool:
        """The routed experts ran over every token once per expert (llama4's dense dispatch: the
        scores scale a copy of the input per expert), not over the chosen slots: measured as the
        token slots they ran over per token."""
        experts = self.experts
        if experts is None or not self.probe.tokens:
            return False
        count = expert_count(experts)
        rows = self.per_call(self.probe.experts_rows[self.experts_path])  # one call's (`recurrent_cycles`)
        return rows == count * self.probe.tokens and count > self.top_k()

    def ff_matmuls(self) -> int:
        """The layer's feed-forward weights over one h×width projection's (one expert's for MoE,
        over one projection between its input width and its width: a latent MoE's experts run
        in the latent width)."""
        experts = self.experts
        across = self.hidden
        if experts is not None:
            width, across = self.expert_width(), self.experts_input_width()
            weights = sum(rows * columns for _, rows, columns in self.experts_weights())  # one expert's slice of each
        else:
            if self.shape.ffn == "none":
                return 0  # a mixer-only block (Mamba, Mamba2, an attention-only block): no feed-forward
            width = self.dense_width()
            self.one_dense_width()
            weights = sum(m.weight.numel() for _, m in self.dense_projections())
        if not width:
            raise SpecError("unsupported_layer", f"layer {self.index}: no feed-forward projection back to the hidden size {self.hidden}")
        count, rest = divmod(weights, across * width)
        if rest or not count:
            raise SpecError(
                "unsupported_layer",
                f"layer {self.index}: feed-forward weights {weights} are not a whole number of {across}x{width} projections",
            )
        return count

    def activations(self) -> int:
        """Activation calls of one expert (MoE) or of the dense MLP. Stacked experts run one by
        one (a loop over the experts hit: longcat_flash's) call it once each expert that ran: a
        whole multiple of the experts that compute and get a slot at the census's assumed even
        loads (census/measure/expert_counts.py), over them. An inline activation whose kept
        tensor an activation module kept after it as its input is a step of that activation's, no
        call of its own (LayerProbe.act_chained: gemma3n's sparsity ReLU before its GELU)."""
        if self.experts_path:
            calls = sum(n for owner, n in self.probe.activations.items() if owner == self.experts_owner)
            experts = self.experts
            if is_experts_interface(experts) or not self.probe.tokens:
                return calls
            loads = even_counts(self.probe.tokens * self.top_k(), expert_candidates(experts))
            ran = sum(1 for n in loads[: expert_count(experts)] if n)
            return calls // ran if ran > 1 and calls % ran == 0 else calls
        gate = self.gate.activations if self.gate else frozenset()
        return sum(n - self.probe.act_chained[owner] for owner, n in self.probe.activations.items() if self.part(owner) in self.ffn_children and owner not in gate)

    def mlp_bias(self) -> bool:
        if self.experts is not None and experts_bias(self.experts):
            return True
        dense = self.ffn_children if not self.experts_path else set()
        shared = [m for _, child in self.shared_children() for m in child.modules()]
        return any(is_projection(m) and has_bias(m) for _, m in self.named(dense)) or any(is_projection(m) and has_bias(m) for m in shared)
