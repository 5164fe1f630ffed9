"""The model's ends (census/head.py measures, catalogue/records/head.yaml prices): the two
agree on shipped configs, and the logits' loss upcast is the issue's ~8 GiB for gemma-3-1b."""

from __future__ import annotations

import pytest
from conftest import load_shipped

from speccat.catalogue.records.head import load_head, price_head
from speccat.census.family import family_for

SEQ = 128


def measured(repo: str) -> tuple[dict, dict]:
    from speccat.census.build import build
    from speccat.census.head import probe_head
    from speccat.census.resolve import resolve_config

    top, text, _ = resolve_config(load_shipped(repo))
    return probe_head(build(top, text), SEQ), {"hidden_size": text.hidden_size, "vocab_size": text.vocab_size}


def spec_of(repo: str, dims: dict) -> dict:
    c = load_shipped(repo)
    c = c.get("text_config", c)
    return {**dims, "num_attention_heads": c["num_attention_heads"], "layers": [{"kind": "decoder", "count": 1}],
            "ops": {"decoder": {op: 0 for op in ("attMM", "attBMM", "ffMM", "softmax", "dropout", "normOp", "gather", "headCast", "ffAct", "linrec")}},
            "flavours": {"decoder": {"attention": "full", "ffn": "dense"}}, "intermediate_size": 1}  # fmt: skip


@pytest.mark.parametrize("repo", ["meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-1b-it", "Qwen/Qwen3-0.6B"])
def test_priced_ends_equal_the_measured_ones(repo, records, grid):
    got, dims = measured(repo)
    spec = spec_of(repo, dims)
    defaults = family_for(load_shipped(repo)["model_type"]).pricing_defaults()
    priced = price_head(spec, defaults, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, load_head())
    h, v = dims["hidden_size"], dims["vocab_size"]
    # by hand: the head's bf16 input, fp32 log-probabilities, int64 labels per token; one pad label and the scalar loss
    assert got["logits"] * SEQ == SEQ * (h * 2 + v * 4 + 8) + 8 + 4
    # the bf16 output and the int64 ids; Gemma's scaled embedding also saves its scale (one bf16 scalar)
    assert got["embedding"] * SEQ in (SEQ * (h * 2 + 8), SEQ * (h * 2 + 8) + 2)
    assert got["final_norm"] * SEQ == priced["final_norm"] and got["logits"] * SEQ == priced["logits"]
    assert got["embedding"] * SEQ - priced["embedding"] in (0, 2)


def test_gemma3_1b_logits_at_8192_are_8_gib(records, grid):
    c = load_shipped("google/gemma-3-1b-it")
    spec = spec_of("google/gemma-3-1b-it", {"hidden_size": c["hidden_size"], "vocab_size": c["vocab_size"]})
    defaults = family_for("gemma3_text").pricing_defaults()
    priced = price_head(spec, defaults, records, grid.setting({"seq_length": 8192}), grid.dtype_bytes, load_head())
    assert priced["logits"] / 2**30 == pytest.approx((8192 * (262144 * 4 + 1152 * 2 + 8) + 12) / 2**30)
    assert 8.0 < priced["logits"] / 2**30 < 8.1
