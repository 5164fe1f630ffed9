"""What a probed layer's mixer is, beyond softmax attention: the kernel it ran (a kind's measured
`attention_impl`), whether it is a feed-forward-only block, the delta rule's gate, the Mamba
scans (heads, run apart from the conv, dt rank), the projections of a scan's children and a
conv's width (docs/census.md, "State-space mixers", "Linear attention run in torch"). The
mixers' variant facts are read in census/describe/variants_mixers.py.
"""

from __future__ import annotations

from torch import nn

from speccat.census.describe.layer_roles import LayerRoles
from speccat.census.structure.kernel_registry import KernelCall
from speccat.census.spec import SpecError
from speccat.census.structure.predicates import is_experts, is_norm, is_projection

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
SCAN_APART_OP = "speccat::selective_scan"
EAGER_OP = "eager"  # softmax attention run as the model's eager code (census/kernels/attention.py `_as_written`)


class MixerFacts(LayerRoles):
    """A layer's mixer facts (see the module's docstring)."""

    def mixer_op(self) -> str:
        """The kernel the layer's mixer ran (its measured `attention_impl`)."""
        mixers = self.shape.mixer.split("_", 1) if self.shape.mixer.startswith("full_") else [self.shape.mixer]
        ops = [
            SCAN_APART_OP if mixer == "mamba" and self.scan_apart() else KDA_OP if self.delta_gate_channel_bytes()
            else EAGER_OP if mixer in ("full", "cross") and any(k.eager for k in self.attention_kernels()) else MIXER_OPS[mixer]
            for mixer in mixers
        ]
        return "+".join(ops)  # a hybrid's both: the attention kernel and the scan's

    def feed_forward_only(self) -> bool:
        """No kernel ran, and every child beside the norms is routed experts or an MLP: projections
        and an activation that ran, no other module with parameters, no attention class."""
        if self.probe.kernels:
            return False
        children = [(n, c) for n, c in self.layer.named_children() if not is_norm(c) and any(True for _ in c.parameters())]
        return bool(children) and all(any(is_experts(m) for m in c.modules()) or self.is_mlp(n) for n, c in children)

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

    def scan_dt_rank(self, scan: KernelCall) -> int:
        """The dt rank: the fused kernel's dt projection weight is (inner, rank); a scan run apart is
        not handed it, so it is the x projection's width (the narrowest projection of the inner
        width: rank + 2·state) less B and C. A mixer scanning per Mamba head (zamba's) projects
        each head with its own weight, one 3-D parameter (heads, rank + 2·state, head's inner)."""
        if "dt_weight" in scan:
            return int(scan["dt_weight"][1])
        inner, state = scan["A"]
        heads = self.scan_heads()
        widths = [m.weight.shape[0] for _, m in self.named({scan.child}) if is_projection(m) and m.weight.shape[1] == inner]
        if heads > 1:
            widths += [p.shape[1] for n, p in self.layer.named_parameters() if self.part(n) == scan.child and p.dim() == 3 and (p.shape[0], p.shape[2]) == (heads, inner)]
        rank = min(widths, default=0) - 2 * state
        if rank <= 0:
            raise SpecError("unsupported_layer", f"layer {self.index}: no x projection of the inner width {inner} gives the selective scan's dt rank")
        return int(rank)

    def scan_projections(self) -> int:
        """The projections of the children a scan, short conv, WKV or linear attention run in torch
        ran in (in, x, dt and out for Mamba; in and out for Mamba2 and a short conv; key, value,
        receptance and output for RWKV; x, y and out for an RG-LRU block)."""
        children = {k.child for k in self.scan_kernels() + self.ssd_kernels() + self.conv_kernels() + self.wkv_kernels() + self.rglru_kernels() + self.linear_eager_kernels() if k.child}
        return sum(1 for _, m in self.named(children) if is_projection(m))

    def conv_kernel(self) -> int | None:
        """The width of the first Conv1d in the attention's children (a mixer's depthwise conv)."""
        for _, m in self.named(self.mixer_children):
            if isinstance(m, nn.Conv1d):
                return int(m.kernel_size[0])
        return None
