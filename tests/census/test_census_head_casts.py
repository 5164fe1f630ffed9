"""What a model's own head keeps beyond the logits' tensors over the tokens (census/measure/ends.py,
the ends' head_input_fp32, head_weight_fp32 and vocab_vectors_fp32, which ends.yaml's eager loss
prices):

- ergo's head casts its input and its bf16 weight to fp32 for its matmul
  (F.linear(hidden_states.float(), weight.float())), which keeps both: the input over the tokens in
  fp32 and the weight's fp32 copy once whatever the tokens (V × h × 4 bytes, 8 GiB at its default);
- dory's head multiplies the fp32 logits by its learned logit scale times a factor, a product
  that keeps the scale, one fp32 value per vocabulary entry, once whatever the tokens.

Neither is a tensor over the tokens and the vocabulary, which logit_saved and logit_saved_fp32
count (dory's scale was taken for one, ergo's weight copy for two: 1.495 and 0.091 of their
logits' end). Each is checked worked by hand from the config's dims, against a real CPU forward
and backward of the model's head and loss, and the price against the census.
"""

from __future__ import annotations

import pytest
import torch
from bench.bench_registry import default_config as default
from support.layer_runs import tiny_model

from speccat.census import run_census

BF16, FP32, I64 = 2, 4, 8
SEQ = 32
TINY_ERGO = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, first_dense_intermediate_size=128,
    moe_intermediate_size=32, shared_intermediate_size=64, num_experts=4, num_experts_per_tok=2, vocab_size=512,
    layer_types=["sliding_attention", "full_attention"], mlp_layer_types=["dense", "sparse"],
)
TINY_DORY = dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=512,
    num_hidden_layers=3, n_input_layers=1, n_recurrent_layers=1, n_output_layers=1, sliding_window=16,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
)
HEAD_FACTS = ("logit_saved", "logit_saved_fp32", "head_input_fp32", "head_weight_fp32", "vocab_vectors_fp32")


def head_facts(spec) -> dict[str, int]:
    return {name: spec["ends"][name] for name in HEAD_FACTS}


def labels_and_count() -> int:
    """What transformers' causal-LM loss keeps beside the tensors over the tokens at one
    micro-batch: the padded int64 labels' one extra entry and nll_loss's fp32 count of scored tokens."""
    return I64 + FP32


def ergo_logits(h: int, V: int, tokens: int) -> int:
    """ergo's logits end, by hand: per token its head's fp32 input, the loss's fp32
    log-probabilities and the int64 label; once, its head's fp32 weight copy and the loss's rest."""
    return tokens * (h * FP32 + V * FP32 + I64) + V * h * FP32 + labels_and_count()


def dory_logits(h: int, V: int, tokens: int) -> int:
    """dory's logits end, by hand: per token its head's bf16 input, the fp32 logits its scale's
    product keeps, the loss's fp32 log-probabilities and the int64 label; once, the fp32 scale."""
    return tokens * (h * BF16 + 2 * V * FP32 + I64) + V * FP32 + labels_and_count()


def priced_logits(spec, tokens: int) -> float:
    from speccat.catalogue.records.ends import load_ends
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.points import price_ends
    from speccat.catalogue.records.settings import load_settings

    records = load_records()
    (row,) = [r for r in price_ends(spec, records, load_settings(), load_ends(records)) if r["kind"] == "end:logits" and r["point"] == "census"]
    return row["priced_per_token"] * tokens


def real_head_and_loss(config: dict, stream_dtype: torch.dtype) -> int:
    """The bytes a real CPU forward of the tiny model's head and loss saves for backward (run
    backward too), from a stack output of `stream_dtype` made inside the watched run (the final
    norm's output, as the census hands it): its parameters aside."""
    model = tiny_model(config, torch.bfloat16)
    saved: dict[int, torch.Tensor] = {}

    def pack(t):
        saved.setdefault(t.untyped_storage()._cdata, t)
        return t

    torch.manual_seed(1)
    hidden = torch.randn(1, SEQ, config["hidden_size"], dtype=stream_dtype, requires_grad=True)
    ids = torch.randint(0, config["vocab_size"], (1, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model.lm_head(hidden * 1)
        loss = model.loss_function(logits=logits, labels=ids, vocab_size=config["vocab_size"])
    loss.backward()
    aside = {t.untyped_storage()._cdata for t in model.parameters()}
    return sum(t.untyped_storage().nbytes() for k, t in saved.items() if k not in aside)


@pytest.fixture(scope="module")
def tiny_ergo():
    config = default("ergo", **TINY_ERGO)
    return config, run_census(config, name="tiny-ergo", seq_length=SEQ).to_dict()


@pytest.fixture(scope="module")
def tiny_dory():
    config = default("dory", **TINY_DORY)
    return config, run_census(config, name="tiny-dory", seq_length=SEQ).to_dict()


def test_ergo_head_keeps_its_fp32_casts(tiny_ergo):
    config, spec = tiny_ergo
    h, V = config["hidden_size"], config["vocab_size"]
    assert head_facts(spec) == dict(logit_saved=0, logit_saved_fp32=1, head_input_fp32=1, head_weight_fp32=1, vocab_vectors_fp32=0)
    by_hand = ergo_logits(h, V, SEQ)
    assert spec["ends"]["bytes_per_token"]["logits"] * SEQ == by_hand
    # ergo's stream is fp32 (its embedding and residual gates are kept in fp32): so is the head's input
    assert real_head_and_loss(config, torch.float32) == by_hand
    assert priced_logits(spec, SEQ) == pytest.approx(by_hand, rel=1e-9)


def test_dory_head_keeps_its_logit_scale(tiny_dory):
    config, spec = tiny_dory
    h, V = config["hidden_size"], config["vocab_size"]
    assert head_facts(spec) == dict(logit_saved=0, logit_saved_fp32=2, head_input_fp32=0, head_weight_fp32=0, vocab_vectors_fp32=1)
    by_hand = dory_logits(h, V, SEQ)
    assert spec["ends"]["bytes_per_token"]["logits"] * SEQ == by_hand
    assert real_head_and_loss(config, torch.bfloat16) == by_hand
    assert priced_logits(spec, SEQ) == pytest.approx(by_hand, rel=1e-9)


def test_defaults_worked_by_hand():
    """At their defaults (256 tokens): ergo's weight copy, 262144 × 8192 × 4 bytes, is 32 MiB a
    token there, and was the 0.091 of its logits' end; dory's scale is 2 KiB a token."""
    ergo = run_census(default("ergo"), name="ergo", seq_length=256).to_dict()
    assert head_facts(ergo) == dict(logit_saved=0, logit_saved_fp32=1, head_input_fp32=1, head_weight_fp32=1, vocab_vectors_fp32=0)
    assert ergo["ends"]["bytes_per_token"]["logits"] * 256 == ergo_logits(8192, 262144, 256)
    assert priced_logits(ergo, 256) == pytest.approx(ergo_logits(8192, 262144, 256), rel=1e-9)


def test_a_llama_head_keeps_none_of_them():
    """A plain head: a bf16 matmul on the bf16 stream, the loss's fp32 log-probabilities."""
    config = default("llama", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1, vocab_size=512)
    spec = run_census(config, name="tiny-llama", seq_length=SEQ).to_dict()
    assert head_facts(spec) == dict(logit_saved=0, logit_saved_fp32=1, head_input_fp32=0, head_weight_fp32=0, vocab_vectors_fp32=0)
    assert real_head_and_loss(config, torch.bfloat16) == spec["ends"]["bytes_per_token"]["logits"] * SEQ
