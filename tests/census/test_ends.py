"""The model's ends (census/measure/ends.py measures them into the spec's `ends`,
catalogue/records/ends.yaml prices them): the two agree on shipped configs, and equal the bytes
worked by hand; the logits' loss upcast is the issue's ~8 GiB for gemma-3-1b."""

from __future__ import annotations

import pytest
from conftest import load_shipped

from speccat.catalogue.records.ends import load_ends, price_ends_at

SEQ = 128


def spec_of(repo: str) -> dict:
    from speccat.census import run_census

    return run_census(load_shipped(repo), name=repo, seq_length=SEQ).to_dict()


SOFTCAPPED = "google/gemma-2-2b-it"  # final_logit_softcapping 30.0


@pytest.mark.parametrize("repo", ["meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-1b-it", "Qwen/Qwen3-0.6B", "openai-community/gpt2", SOFTCAPPED])
def test_priced_ends_equal_the_measured_ones(repo, records, grid):
    spec = spec_of(repo)
    got = spec["ends"]["bytes_per_token"]  # the census ran the model's ends (census/measure/ends.py)
    assert spec["ends"]["seq_length"] == SEQ
    priced = price_ends_at(spec, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, load_ends(records))
    h, v = spec["hidden_size"], spec["vocab_size"]
    # by hand: the head's bf16 input, fp32 log-probabilities, int64 labels per token; one pad label
    # and the scalar loss. Gemma 2's causal LM caps its logits (logits / 30, tanh, * 30): tanh
    # keeps its bf16 output, one more tensor over the vocabulary.
    softcap = load_shipped(repo).get("final_logit_softcapping") is not None
    assert softcap == (repo == SOFTCAPPED)
    assert (spec["ends"]["logit_saved"], spec["ends"]["logit_saved_fp32"]) == (int(softcap), 1)
    assert got["logits"] * SEQ == SEQ * (h * 2 + v * 2 * softcap + v * 4 + 8) + 8 + 4
    # the int64 ids (the output is the first layer's input, in its price where it keeps it);
    # Gemma's scaled embedding also saves its scale (one bf16 scalar)
    assert got["embedding"] * SEQ in (SEQ * 8, SEQ * 8 + 2)
    # by hand: an RMSNorm keeps its fp32 input, one fp32 rstd and the normalised input its weight
    # multiplies (bf16 after Llama's cast back, fp32 in Gemma's (1 + w) form, which also keeps
    # that fp32 weight copy); a LayerNorm its bf16 input and fp32 mean and rstd (CUDA widths)
    final_norm_by_hand = {
        "meta-llama/Llama-3.2-1B-Instruct": SEQ * (h * (4 + 2) + 4),
        "Qwen/Qwen3-0.6B": SEQ * (h * (4 + 2) + 4),
        "google/gemma-3-1b-it": SEQ * (h * (4 + 4) + 4) + 4 * h,
        SOFTCAPPED: SEQ * (h * (4 + 4) + 4) + 4 * h,
        "openai-community/gpt2": SEQ * (h * 2 + 4 + 4),
    }
    assert got["final_norm"] * SEQ == final_norm_by_hand[repo]
    assert got["final_norm"] * SEQ == priced["final_norm"] and got["logits"] * SEQ == priced["logits"]
    assert got["embedding"] * SEQ - priced["embedding"] in (0, 2)


def test_gemma3_1b_logits_at_8192_are_8_gib(records, grid):
    c = load_shipped("google/gemma-3-1b-it")
    spec = spec_of("google/gemma-3-1b-it")
    priced = price_ends_at(spec, records, grid.setting({"seq_length": 8192}), grid.dtype_bytes, load_ends(records))
    assert priced["logits"] / 2**30 == pytest.approx((8192 * (262144 * 4 + 1152 * 2 + 8) + 12) / 2**30)
    assert 8.0 < priced["logits"] / 2**30 < 8.1


def test_a_loss_on_the_bf16_logits_keeps_its_log_probabilities_in_bf16(records, grid):
    """bart's causal LM calls CrossEntropyLoss on the head's bf16 output, with no fp32 upcast:
    the census runs that forward, so its ends count one bf16 tensor over the vocabulary and no
    fp32 one, and ends.yaml prices the same within the records' tolerance."""
    from bench.bench_registry import default_config
    from speccat.census import run_census

    spec = run_census(default_config("bart"), name="bart", seq_length=SEQ).to_dict()
    h, v = spec["hidden_size"], spec["vocab_size"]
    assert (spec["ends"]["logit_saved"], spec["ends"]["logit_saved_fp32"]) == (1, 0)
    # by hand: the head's bf16 input and the bf16 log-probabilities; the labels are the input
    # ids themselves (bart does not shift them), booked to the embedding; the bf16 scalar loss
    assert spec["ends"]["bytes_per_token"]["logits"] * SEQ == SEQ * (h * 2 + v * 2) + 2
    priced = price_ends_at(spec, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, load_ends(records))
    assert priced["logits"] / (spec["ends"]["bytes_per_token"]["logits"] * SEQ) == pytest.approx(1, abs=records.tolerance)
    assert priced["logits"] == SEQ * (h * 2 + v * 2 + 8) + 8 + 4  # the labels ends.yaml books apart


@pytest.mark.parametrize("model_type", ["roberta-prelayernorm", "modernbert-decoder"])
def test_a_transform_before_the_head(model_type, records, grid):
    """roberta-prelayernorm's and modernbert-decoder's LM head modules run a dense layer, an
    activation and a LayerNorm before the vocabulary projection: beyond the head's input they keep
    three bf16 tensors of the hidden width (the dense's input, the activation's input, the
    LayerNorm's input) and the LayerNorm's fp32 mean and rstd per token, under any loss."""
    from bench.bench_registry import default_config
    from speccat.census import run_census

    spec = run_census(default_config(model_type), name=model_type, seq_length=SEQ).to_dict()
    h, v = spec["hidden_size"], spec["vocab_size"]
    assert (spec["ends"]["transform_saved"], spec["ends"]["transform_rows_fp32"]) == (3, 2)
    transform = SEQ * (3 * h * 2 + 2 * 4)
    assert spec["ends"]["bytes_per_token"]["logits"] * SEQ == SEQ * (h * 2 + v * 4 + 8) + 8 + 4 + transform
    ends = load_ends(records)
    priced = price_ends_at(spec, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, ends)
    assert priced["logits"] == spec["ends"]["bytes_per_token"]["logits"] * SEQ
    from speccat.catalogue.records.ends import loss_prices

    at = grid.with_settings([grid.setting({"seq_length": SEQ})])
    kept = {row["loss"]: row["kept_bytes"] for row in loss_prices(spec, records, at, ends)}
    without = dict(spec, ends=dict(spec["ends"], transform_saved=0, transform_rows_fp32=0))
    plain = {row["loss"]: row["kept_bytes"] for row in loss_prices(without, records, at, ends)}
    assert {loss: kept[loss] - plain[loss] for loss in kept} == {loss: transform for loss in kept}


def test_a_real_transform_before_the_head_keeps_what_is_priced(records, grid):
    """A tiny roberta-prelayernorm's head run for real on CPU in bf16 with transformers' loss: every
    storage its graph keeps (the head's input, its transform's saves, the fp32 log-probabilities,
    the labels, the loss's count), parameters left out and the LayerNorm's statistics at their
    CUDA width (fp32; the CPU kernel keeps bf16), equals ends.yaml's logits end at the census's
    facts."""
    import torch
    from support.layer_runs import tiny_model

    from bench.bench_registry import default_config
    from speccat.census import run_census

    config = {**default_config("roberta-prelayernorm"), "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "num_hidden_layers": 1, "vocab_size": 300}
    model = tiny_model(config, torch.bfloat16)
    seq = 32
    torch.manual_seed(1)
    hidden = torch.randn(1, seq, 64, dtype=torch.bfloat16, requires_grad=True)
    ids = torch.randint(0, 300, (1, seq))
    kept: dict[int, torch.Tensor] = {}

    def pack(t):
        kept.setdefault(t.untyped_storage()._cdata, t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.loss_function(model.lm_head(hidden), ids, vocab_size=300)
    for p in model.parameters():
        kept.pop(p.untyped_storage()._cdata, None)
    stats = [t for t in kept.values() if t.numel() == seq and t.is_floating_point()]
    assert len(stats) == 2  # the LayerNorm's mean and rstd
    real = sum(t.untyped_storage().nbytes() for t in kept.values()) + sum(t.numel() * (4 - t.element_size()) for t in stats)
    spec = run_census(config, name="tiny-roberta-prelayernorm", seq_length=seq).to_dict()
    priced = price_ends_at(spec, records, grid.setting({"seq_length": seq}), grid.dtype_bytes, load_ends(records))
    assert priced["logits"] == real


def test_a_spec_with_no_ends_is_priced_as_the_causal_lm_loss_keeps_its_logits(records, grid):
    spec = spec_of("meta-llama/Llama-3.2-1B-Instruct")
    measured = price_ends_at(spec, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, load_ends(records))
    del spec["ends"]
    assert price_ends_at(spec, records, grid.setting({"seq_length": SEQ}), grid.dtype_bytes, load_ends(records)) == measured


def test_a_change_of_the_ends_prices_alone_changes_the_version_stored_prices_are_keyed_by(records, tmp_path, monkeypatch):
    """The night stores the ends' prices (end_prices) under records_version: ends.yaml is hashed
    into it, so a change to it prices every config again."""
    from speccat.catalogue.records import ends
    from speccat.flows.refresh import current_versions

    shipped = current_versions()["records"]
    changed = tmp_path / "ends.yaml"
    changed.write_text(ends.ENDS_PATH.read_text().replace("unmeasured: {logit_saved: 0,", "unmeasured: {logit_saved: 1,"))
    assert load_ends(records, changed).unmeasured["logit_saved"] == 1
    monkeypatch.setattr(ends, "ENDS_PATH", changed)
    assert current_versions()["records"] != shipped
