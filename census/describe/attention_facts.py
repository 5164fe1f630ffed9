"""What a probed layer's attention is, read off its kernel calls and its modules: keys appended
to the layer's own (docs/census.md, "Appended keys"), QK-norm, the q, k, v and o biases, an
output gate of any width and MLA's latent ranks. The attention's variant facts are read in
census/describe/variants_attention.py.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import torch

from speccat.census.describe.layer_roles import HALF, LayerRoles, has_bias
from speccat.census.spec import SpecError
from speccat.census.structure.predicates import QK_NORM_NAME, is_norm, is_projection


class OutputGate(NamedTuple):
    """An attention output gate (AttentionFacts.output_gate), each per query head and token."""

    width: int  # elements of the gate the product reads: 1 (a gate per head), head_dim (per channel); 0 without one
    kept: int  # elements backward keeps of the gate's ops in the compute dtype (a sigmoid's output)
    kept_fp32: int  # and in fp32 (a softplus computed in fp32 keeps its fp32 input)
    before_copy: bool  # the product is taken on the kernel's heads-major output, before the copy o_proj reads
    factor_fp32: bool  # the product is taken on an fp32 cast of the attention's output, which it keeps


class AttentionFacts(LayerRoles):
    """A layer's attention facts (see the module's docstring)."""

    def keys_appended_every(self) -> int:
        """Tokens per key the self-attention appends to the layer's own (one compressed entry per
        that many tokens: DeepSeek-V4's compressors), 0 when its keys are its tokens; refused when
        the appended keys are not one per a whole number of tokens (docs/census.md, "Appended keys")."""
        every = 0
        for k in self.attention_kernels():
            queries, extra = k["q"][2], k["k"][2] - k["q"][2]
            if self.shape.mixer == "cross" or extra == 0:
                continue
            if queries % extra:
                raise SpecError(
                    "unsupported_layer",
                    f"layer {self.index} ({type(self.layer).__name__}): its queries attend to {extra} keys appended to the layer's own "
                    f"{queries}, not one per a whole number of tokens, which the census does not price",
                )
            every = max(every, queries // extra)
        return every

    def qk_norm(self) -> bool:
        """A norm of the queries or keys held by the attention module itself (q_norm, k_norm)."""
        return any(
            QK_NORM_NAME.match(n) and is_norm(m) for child in self.mixer_children for n, m in self.module(child).named_children()
        )

    def qkv_bias(self) -> bool:
        outputs = set(self.probe.output_projections)
        children = {k.child for k in self.probe.kernels if k.child and k.kind in ("attention", "delta_rule")}  # a Mamba mixer or short conv has no q, k, v
        return any(is_projection(m) and has_bias(m) for n, m in self.named(children) if n not in outputs)

    def o_bias(self) -> bool:
        return any(has_bias(self.module(n)) for n in self.probe.output_projections)

    def output_gate(self) -> OutputGate:
        """The attention's output gate, read off what ran (census/measure/output_gates.py): a
        product, in a child where an attention kernel ran and after it, that a projection of
        that child reads, of a factor made from a projection's output by elementwise ops alone
        (lfm3's sigmoid of g_proj, one per head; laguna's softplus of g_proj in fp32; Qwen3-Next's
        sigmoid of q_proj's second half, head_dim per head). Its width is that factor's elements
        per query head and token; what it keeps is what backward keeps of those ops' outputs,
        booked to that child, per query head and token by dtype; and whether the product is taken
        on the kernel's output as the kernel laid it out (dots3's, heads-major), so that the copy
        o_proj reads is made after it, and whether it is taken on an fp32 cast of the attention's
        output (inkling2's). No gate: all 0."""
        kernels = self.attention_kernels()
        children = {k.child for k in kernels if k.child}
        reads = self.projection_reads(children)
        gates = {
            gated.projection: gated
            for product, gated in self.probe.gated_products.items()
            if product in reads and self.part(gated.projection) in children
        }
        if not gates:
            return OutputGate(0, 0, 0, False, False)
        per_head = self.probe.tokens * kernels[0]["q"][1]  # the tokens times the query heads
        ops = {f"child:{c}" for c in children}
        kept = Counter()
        for (projection, op, dtype), elements in self.probe.gate_kept.items():
            if projection in gates and op in ops:
                kept["half" if dtype in HALF else str(dtype)] += elements
        width = max(gated.elements for gated in gates.values()) // per_head
        per_call = per_head * self.cycles()  # what one call keeps, of calls with grad run alike (LayerView.cycles: recurrent_cycles)
        return OutputGate(
            width, kept["half"] // per_call, kept[str(torch.float32)] // per_call,
            any(gated.before_copy for gated in gates.values()), any(gated.factor_fp32 for gated in gates.values()),
        )  # fmt: skip

    def mla(self) -> dict[str, int]:
        """MLA latent ranks from kv_b_proj, kv_a_proj_with_mqa and q_a_proj (absent when not MLA)."""
        for child in self.mixer_children:
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
