"""An attention output multiplied by a sigmoid gate of a projection of its own (afmoe's
`gate_proj`) is the attention output gate the records price (as Qwen3-Next's, made by q_proj): a gate of
head_dim per head whose sigmoid keeps its output (tests/census/test_census_head_gate.py: gates
of other widths and activations)."""

from __future__ import annotations

from support.layer_runs import priced_vs_measured

from speccat.census import run_census


def test_an_output_gate_of_its_own_projection_is_the_attention_output_gate():
    """afmoe's attention multiplies its output by sigmoid(gate_proj(x)), gate_proj a projection of
    its own of heads × head_dim (16 × 128 in transformers' default config): attMM keeps the
    projections' input, the sigmoid's output and the product o_proj reads, each 2048 bf16 wide
    per token, and the records price the gate as Qwen3-Next's (q_proj's second half)."""
    from transformers import CONFIG_MAPPING

    config = {**CONFIG_MAPPING["afmoe"]().to_dict(), "model_type": "afmoe"}
    spec = run_census(config, name="afmoe", seq_length=256)
    heads, head_dim, hidden = spec["num_attention_heads"], spec["head_dim"], spec["hidden_size"]
    assert (heads, head_dim, hidden) == (16, 128, 2048) and spec["attn_output_gate"] is True
    for kind in ("full_dense", "full_moe"):
        assert spec["measured"][kind]["bytes_per_token"]["attMM"] == 2 * hidden + 2 * (2 * heads * head_dim)
        # a gate per head channel (head_dim per head) whose sigmoid's bf16 output is kept, no fp32
        facts = spec["variants"][kind]
        assert (facts["attn_gate_width"], facts["attn_gate_kept"], facts["attn_gate_kept_fp32"]) == (head_dim, head_dim, 0)
    assert all(abs(priced / measured - 1) <= 0.02 for priced, measured in priced_vs_measured(spec, 256).values())
