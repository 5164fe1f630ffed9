"""What a probed layer's attention is, read off its kernel calls and its modules: keys appended
to the layer's own (docs/census.md, "Appended keys"), QK-norm, the q, k, v and o biases, an
output gate and MLA's latent ranks. The attention's variant facts are read in
census/describe/variants_attention.py.
"""

from __future__ import annotations

from speccat.census.describe.layer_roles import LayerRoles, has_bias
from speccat.census.spec import SpecError
from speccat.census.structure.predicates import QK_NORM_NAME, is_norm, is_projection


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

    def output_gate(self, heads: int, head_dim: int) -> bool:
        """The attention's output multiplied by a sigmoid gate of the heads' width: the gate made
        by q_proj beside the queries (twice heads × head_dim wide: Qwen3-Next), or a projection of
        its own in the attention whose output's sigmoid multiplies a tensor (afmoe's gate_proj)."""
        for child in self.mixer_children:
            q_proj = getattr(self.module(child), "q_proj", None)
            if q_proj is not None and is_projection(q_proj) and q_proj.weight.shape[0] == 2 * heads * head_dim:
                return True
        return any(
            products and self.part(path) in self.mixer_children and self.module(path).weight.shape[0] == heads * head_dim
            for path, products in self.probe.sigmoid_gates.items()
        )

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
