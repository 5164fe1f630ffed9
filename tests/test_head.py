"""The model's ends (census/head.py measures them into the spec's `ends`,
catalogue/records/head.yaml prices them): the two agree on shipped configs, and equal the bytes
worked by hand; the logits' loss upcast is the issue's ~8 GiB for gemma-3-1b."""

from __future__ import annotations

import pytest
from conftest import load_shipped

from speccat.catalogue.records.head import load_head, price_head
from speccat.census.family import family_for

SEQ = 128


def spec_of(repo: str) -> dict:
    from speccat.census import run_census

    return run_census(load_shipped(repo), name=repo, seq_length=SEQ).to_dict()


@pytest.mark.parametrize("repo", ["meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-1b-it", "Qwen/Qwen3-0.6B", "openai-community/gpt2"])
def test_priced_ends_equal_the_measured_ones(repo, records, grid):
    spec = spec_of(repo)
    got = spec["ends"]["bytes_per_token"]  # the census ran the model's ends (census/head.py)
    assert spec["ends"]["seq_length"] == SEQ
    defaults = family_for(load_shipped(repo)["model_type"]).pricing_defaults()
    priced = price_head(spec, defaults, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, load_head(records))
    h, v = spec["hidden_size"], spec["vocab_size"]
    # by hand: the head's bf16 input, fp32 log-probabilities, int64 labels per token; one pad label and the scalar loss
    assert got["logits"] * SEQ == SEQ * (h * 2 + v * 4 + 8) + 8 + 4
    # the bf16 output and the int64 ids; Gemma's scaled embedding also saves its scale (one bf16 scalar)
    assert got["embedding"] * SEQ in (SEQ * (h * 2 + 8), SEQ * (h * 2 + 8) + 2)
    # by hand: an RMSNorm keeps its fp32 input, one fp32 rstd and the normalised input its weight
    # multiplies (bf16 after Llama's cast back, fp32 in Gemma's (1 + w) form, which also keeps
    # that fp32 weight copy); a LayerNorm its bf16 input and fp32 mean and rstd (CUDA widths)
    final_norm_by_hand = {
        "meta-llama/Llama-3.2-1B-Instruct": SEQ * (h * (4 + 2) + 4),
        "Qwen/Qwen3-0.6B": SEQ * (h * (4 + 2) + 4),
        "google/gemma-3-1b-it": SEQ * (h * (4 + 4) + 4) + 4 * h,
        "openai-community/gpt2": SEQ * (h * 2 + 4 + 4),
    }
    assert got["final_norm"] * SEQ == final_norm_by_hand[repo]
    assert got["final_norm"] * SEQ == priced["final_norm"] and got["logits"] * SEQ == priced["logits"]
    assert got["embedding"] * SEQ - priced["embedding"] in (0, 2)


def test_gemma3_1b_logits_at_8192_are_8_gib(records, grid):
    c = load_shipped("google/gemma-3-1b-it")
    spec = spec_of("google/gemma-3-1b-it")
    defaults = family_for("gemma3_text").pricing_defaults()
    priced = price_head(spec, defaults, records, grid.setting({"seq_length": 8192}), grid.dtype_bytes, load_head(records))
    assert priced["logits"] / 2**30 == pytest.approx((8192 * (262144 * 4 + 1152 * 2 + 8) + 12) / 2**30)
    assert 8.0 < priced["logits"] / 2**30 < 8.1
