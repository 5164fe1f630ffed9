"""Records v2 beyond the census's setting, against sources the records do not share code with.

- The `megatron` stack against Korthikanti et al. (2022), "Reducing Activation Recomputation in
  Large Transformer Models", Table 2: a GPT-3-175B-shaped layer (GPT-NeoX config: h 12288, a 96,
  ffn 4h, GeLU, LayerNorm, sequential residual), s 2048, fp16, flash attention off, attention
  and hidden dropout on. The paper counts bytes per layer as sbh(34 + 5as/h) with no
  parallelism, sbh(34/t + 5as/(ht)) with tensor and sequence parallelism, and sbh·34/t with
  the attention core (scores, softmax, its dropout, the product with v) recomputed. It leaves
  out the norms' fp32 statistics (16 bytes per token here), well inside the 0.5% allowed.
- The `transformers` stack without flash attention (transformers' eager attention): a real CPU
  forward of a tiny Llama layer, whose autograd graph holds exactly what backward keeps, priced
  by the records at flash_attention false. The s² terms are the fp32 softmax output and its
  bf16 cast: 6·a·s bytes per token (5·a·s would be Megatron's fused softmax).
"""

from __future__ import annotations

import pytest
import torch
from support.layer_runs import saved_by_graph
from support.pricing_specs import GPT3_175B_SHAPE

from speccat.catalogue.records.flags import load_flags
from speccat.catalogue.records.oprecords import load_records
from speccat.catalogue.records.pricing import price_layers
from speccat.catalogue.records.settings import load_settings
from speccat.census import run_census

TOLERANCE = 0.005


def core_attn() -> tuple[str, ...]:
    """The switches flags.yaml says Megatron's `--recompute-modules core_attn` gives: Table 2's
    selective recompute checks the mapping."""
    frameworks, _ = load_flags(tuple(load_records().switches))
    (megatron,) = [fw for fw in frameworks if fw.name == "megatron"]
    return next(f.switches for f in megatron.flags if f.name == "core_attn")


@pytest.fixture(scope="module")
def gpt3():
    return run_census(GPT3_175B_SHAPE, name="gpt3-175b-shape")


def _layer_bytes(spec, switches=(), **setting) -> float:
    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting(setting)])
    prices = price_layers(spec, records, one)
    (kind,) = prices.kinds
    return float(prices.total[0, 0, records.mask_of(list(switches))])


@pytest.mark.parametrize(
    "tp, switches, per_sbh",
    [
        (1, (), lambda a, s, h, t: 34 + 5 * a * s / h),  # no parallelism
        (8, (), lambda a, s, h, t: 34 / t + 5 * a * s / (h * t)),  # tensor parallel 8 with sequence parallelism
        (8, core_attn(), lambda a, s, h, t: 34 / t),  # selective recompute of the attention core
        (1, core_attn(), lambda a, s, h, t: 34 / t),
    ],
    ids=["no-parallelism", "tp8-sp", "tp8-sp-selective", "selective"],
)
def test_megatron_stack_matches_korthikanti_table_2(gpt3, tp, switches, per_sbh):
    s, b, h, a = 2048, 1, 12288, 96
    expected = s * b * h * per_sbh(a, s, h, tp)
    got = _layer_bytes(gpt3, switches, stack="megatron", seq_length=s, tp=tp, sequence_parallel=True, flash_attention=False, dtype="fp16")
    assert abs(got / expected - 1) <= TOLERANCE, (got, expected)


def test_the_census_states_what_table_2_assumes(gpt3):
    (kind,) = gpt3["ops"]
    assert gpt3["layer_norms"] and gpt3["variants"][kind]["attention_dropout"]
    assert gpt3["ops"][kind]["dropout"] == 2  # after the attention block and after the MLP


def test_megatron_flash_keeps_no_scores(gpt3):
    """With flash attention the s² terms go: what is left is 34sbh plus q, k, v's kernel output and
    one fp32 log-sum-exp per head, less the probabilities' copies (hand-derived per token)."""
    s, h, a = 2048, 12288, 96
    got = _layer_bytes(gpt3, stack="megatron", seq_length=s, flash_attention=True, dtype="fp16")
    # Table 2's 34h, less o_proj's copy (2h: megatron's flash output is already (s, b, h)),
    # plus the kernel's output (2h) and the log-sum-exp (4a); the norms' statistics (16)
    assert got == s * (34 * h - 2 * h + 2 * h + 4 * a + 16)


TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
}  # fmt: skip


@pytest.mark.parametrize("seq", [16, 48])
def test_transformers_stack_without_flash_is_the_real_eager_graph(seq):
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = run_census(TINY_LLAMA, name="tiny-llama", seq_length=seq)
    config = AutoConfig.for_model(**TINY_LLAMA)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()  # eval: no dropout at all
    fixed = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    x = torch.randn(1, seq, 64, dtype=torch.bfloat16, requires_grad=True)
    rotary = model.model.rotary_emb(x, torch.arange(seq).unsqueeze(0))
    mask = torch.full((seq, seq), float("-inf"), dtype=torch.bfloat16).triu(1)[None, None]
    out = model.model.layers[0](x, position_embeddings=rotary, attention_mask=mask)
    out = out[0] if isinstance(out, tuple) else out
    left_out = fixed | {t.untyped_storage()._cdata for t in (*rotary, mask, x, out)}
    real = sum(t.untyped_storage().nbytes() for key, t in saved_by_graph(out).items() if key not in left_out)
    priced = _layer_bytes(spec, seq_length=seq, flash_attention=False)
    assert priced == real
    # the s² terms: fp32 softmax output and its bf16 cast, 6·a·s bytes per token
    with_flash = _layer_bytes(spec, seq_length=seq, flash_attention=True)
    a, dh = 4, 16
    kv_flash, kv_eager = 2 * (2 * 2 * dh), 2 * (2 * a * dh)  # k, v: kv heads under flash, repeated to a heads eager
    lse, o_flash = 4 * a, 2 * a * dh  # flash keeps its output; eager's o_proj keeps a copy instead
    assert priced - with_flash == seq * (6 * a * seq + kv_eager - kv_flash - lse - o_flash + 2 * a * dh)
