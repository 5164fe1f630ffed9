"""One probed layer's view: its modules in roles (census/describe/layer_roles.py) with the facts
of its attention, mixer and feed-forward (attention_facts.py, mixer_facts.py,
feed_forward_facts.py), and what a kind states from it (docs/census.md, "How a config becomes a
spec", step 5, "Op counts", "Parameters", "Measured bytes" and "Variant facts"): its op counts,
its bytes per token by op, its parameters by part and its variant facts (read by the registered
readers: census/describe/variants.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from functools import cached_property

from torch import nn

from speccat.catalogue.vocabulary import OPS, OTHER, UNPRICED_OPS
from speccat.census.describe.attention_facts import AttentionFacts
from speccat.census.describe.counts import FIXED_COUNTS
from speccat.census.describe.feed_forward_facts import FeedForwardFacts
from speccat.census.describe.mixer_facts import MixerFacts
from speccat.census.describe.variants import read_variants
from speccat.census.measure.stream_code import STREAM
from speccat.census.structure.predicates import is_norm


class LayerView(AttentionFacts, MixerFacts, FeedForwardFacts):
    """One probed layer's modules sorted into roles, with what its probe saw, and what its kind states."""

    def ops(self) -> dict[str, int]:
        """The kind's op counts: one call's of the layer. What the probe saw run is counted over
        the calls that ran with grad (`recurrent_cycles`: hrm_text's layers run in several cycles),
        and divided by them (the stream norms are the first call's: `first_call_norms`); the feed-forward's and a mixer's projections are counted from the
        modules, once."""
        per_call = self.per_call
        attn, delta = per_call(len(self.attention_kernels())), per_call(len(self.delta_kernels()))
        scan = per_call(len(self.scan_kernels()) + len(self.ssd_kernels()) + len(self.wkv_kernels()) + len(self.rglru_kernels()) + len(self.linear_eager_kernels()))
        counts = {
            "attMM": 3 * (attn + delta) + per_call(len(self.probe.output_projections)) + self.scan_projections(),
            "attBMM": 2 * attn,
            "ffMM": self.ff_matmuls(),
            "softmax": attn,
            "dropout": per_call(self.probe.dropouts),
            "normOp": len(self.first_call_norms()),
            "headCast": attn,
            "ffAct": per_call(self.activations()),
            "linrec": delta + scan,
        }
        counts.update(FIXED_COUNTS)
        return {op: counts[op] for op in OPS}

    def cycles(self) -> int:
        """The layer's calls that ran with grad (`recurrent_cycles`: hrm_text's L-stack layers, 3 of
        their 6 cycles), when every call ran the first call's ops, in their order: calls run alike
        (hrm_text's), or later calls running more beside them (inkling2_loop_text's passes, each
        after the first mixing the previous pass's messages in through message gates). The kind's
        facts are then the first call's, what all of them ran. Calls that ran otherwise are stated
        together, as one call (1)."""
        return self.probe.kept_calls if self.later_calls_run_first else 1  # calls run alike run the first's ops and nothing more

    @cached_property
    def ran_alike(self) -> bool:
        """Every call of the layer with grad dispatched the same ops, in the same order."""
        each = self.probe.ops_by_call()
        return all(len(call) == len(each[0]) and all(a is b for a, b in zip(call, each[0])) for call in each[1:])

    @cached_property
    def later_calls_run_first(self) -> bool:
        """Each call after the first dispatched the first call's ops, in their order, alone (calls
        run alike) or among more of its own: what all calls ran is the first's."""
        each = self.probe.ops_by_call()

        def runs_within(first: list, later: list) -> bool:
            rest = iter(later)
            return all(any(op is seen for seen in rest) for op in first)

        return bool(each) and all(runs_within(each[0], call) for call in each[1:])

    def per_call(self, seen: int) -> int:
        """`seen`, counted over the layer's calls that ran with grad, per call (`cycles`)."""
        return seen // self.cycles()

    def bytes_per_token(self, seq_length: int) -> dict[str, float]:
        booked = Counter()
        for op, nbytes in self.probe.saved_bytes.items():
            if op.startswith(("child:", STREAM)):  # STREAM: code on the stream after that child (census/measure/stream_code.py)
                child = op.split(":", 1)[1]
                op = "attMM" if child in self.mixer_children else "ffMM" if child in self.ffn_children else OTHER
            booked[op] += nbytes
        return {op: booked.get(op, 0) / seq_length for op in OPS + UNPRICED_OPS}

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
            elif child in self.mixer_children:
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

    def variants(self, num_experts_per_tok: int | None) -> dict[str, bool | int]:
        """The kind's variant facts (catalogue/vocabulary.yaml `variants`), read off what ran by
        their registered readers (census/describe/variants.py)."""
        return read_variants(self, num_experts_per_tok)


def parameter_holders(layers: nn.ModuleList) -> list[dict[str, int]]:
    """Per layer, its parameters' paths -> how many layers of the stack hold that parameter (the
    same tensor: 1 unless a module is shared between layers)."""
    count = Counter(id(p) for layer in layers for p in layer.parameters())
    return [{name: count[id(p)] for name, p in layer.named_parameters()} for layer in layers]
