"""How the probe runs a decoder (census/build/inputs.py): from input embeddings, or from token ids
when the decoder's forward takes no embeddings or its own code fails from them, with the
config's layer count cut to the probed layers or left whole. Run from ids, each layer is still
called with hidden states that require grad and keeps the bytes it keeps from embeddings; the
models that needed ids are then refused precisely for what the census does not price.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from speccat.census.build import inputs
from speccat.census.build.inputs import EMBEDS, IDS, Way
from speccat.census.spec import SpecError

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip


class _Both(nn.Module):
    def forward(self, input_ids=None, inputs_embeds=None, **kwargs): ...


class _IdsOnly(nn.Module):
    def forward(self, input_ids=None, use_cache=None, **kwargs): ...


class _EmbedsOnly(nn.Module):
    def forward(self, inputs_embeds=None, **kwargs): ...


class _Neither(nn.Module):
    def forward(self, *args, **kwargs): ...


def test_the_ways_come_plainest_first_and_only_with_arguments_the_forward_takes():
    assert inputs.ways(_Both()) == [Way(EMBEDS, True), Way(IDS, True), Way(EMBEDS, False), Way(IDS, False)]
    assert inputs.ways(_IdsOnly()) == [Way(IDS, True), Way(IDS, False)]
    assert inputs.ways(_EmbedsOnly()) == [Way(EMBEDS, True), Way(EMBEDS, False)]
    assert inputs.ways(_Neither()) == [Way(EMBEDS, True), Way(EMBEDS, False)]  # as before: embeddings by name


def test_the_inputs_are_embeddings_that_require_grad_or_int64_ids():
    embedding = nn.Embedding(10, 6, dtype=torch.bfloat16)
    embeds = inputs.decoder_inputs(EMBEDS, embedding, 5)["inputs_embeds"]
    assert (embeds.shape, embeds.dtype, embeds.requires_grad, embeds.is_leaf) == ((1, 5, 6), torch.bfloat16, True, False)
    ids = inputs.decoder_inputs(IDS, embedding, 5)["input_ids"]
    assert (ids.shape, ids.dtype, ids.requires_grad) == ((1, 5), torch.int64, False)


def _built(config):
    from speccat.census.build.model import build
    from speccat.census.intake.resolve import resolve_config

    top, text, _ = resolve_config(config)
    return build(top, text)


def _probe_watching_input(built, index: int, seq: int):
    """The probe of layer `index`, and whether the hidden states it was called with required grad."""
    from speccat.census.measure.probe import probe_layers

    seen = []
    hook = built.layers[index].register_forward_pre_hook(lambda m, args, kwargs: seen.append(args[0].requires_grad), with_kwargs=True)
    try:
        probe = probe_layers(built, [index], seq)[index]
    finally:
        hook.remove()
    return probe, seen


def test_a_layer_run_from_ids_keeps_what_it_keeps_from_embeddings():
    """A decoder that runs either way: the first way (embeddings, count cut) is kept on `built`;
    forced to ids, the same layer is called with hidden states that require grad and books the
    same bytes to the same ops (the embedding runs outside it)."""
    plain = _built(LLAMA)
    probe, seen = _probe_watching_input(plain, 1, 32)
    assert plain.way == Way(EMBEDS, True) and seen == [True]
    from_ids = _built(LLAMA)
    from_ids.way = Way(IDS, True)
    probe_ids, seen_ids = _probe_watching_input(from_ids, 1, 32)
    assert seen_ids == [True]
    assert probe.saved_bytes and dict(probe_ids.saved_bytes) == dict(probe.saved_bytes)
    assert dict(probe_ids.saved_storages) == dict(probe.saved_storages)


def _tiny_gemma4() -> dict:
    from bench.bench_registry import default_config

    config = default_config("gemma4_text")
    config.update(
        num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        vocab_size=64, vocab_size_per_layer_input=64, hidden_size_per_layer_input=8,
        layer_types=["sliding_attention"] * 2 + ["full_attention"], per_layer_config={},
    )  # fmt: skip
    return config


def test_a_decoder_that_fails_from_embeddings_runs_from_ids_with_its_whole_layer_count():
    """gemma4's per-layer embeddings reverse the main embedding (a data-dependent nonzero) from
    embeddings, and are reshaped by num_hidden_layers from ids: it runs from ids with the count
    left whole, its layer called with hidden states that require grad, and keeps that way."""
    built = _built(_tiny_gemma4())
    probe, seen = _probe_watching_input(built, 2, 16)
    assert built.way == Way(IDS, False)
    assert seen == [True] and probe.ran and probe.hidden_dims == (1, 16)
    assert probe.saved_bytes["attBMM"] > 0


def test_every_way_failing_raises_the_first_error_with_the_last():
    from speccat.census.measure.model_code import ModelCodeError
    from speccat.census.measure.probe import probe_layers

    built = _built(_tiny_gemma4())
    built.decoder.get_per_layer_inputs = lambda *args: torch.zeros(1).view(3, 5)  # fails whatever it is given
    with pytest.raises(ModelCodeError) as err:
        probe_layers(built, [0], 16)
    assert err.value.reason == "unsupported_layer"
    assert "; from token ids, with the model's layer count: " in str(err.value) and built.way is None


def test_gemma4_per_layer_input_gate_is_told_apart_from_its_mlp():
    """From ids, gemma4's layers run with their per-layer input gate, a fact beside the MLP
    (census/describe/layer_gate.py; tests/census/test_census_layer_gate.py checks what it keeps)."""
    from speccat.census import run_census

    spec = run_census(_tiny_gemma4(), name="gemma4-tiny", seq_length=16)
    assert spec["intermediate_size"] == 64
    assert {facts["per_layer_gate_width"] for facts in spec["variants"].values()} == {8}
    assert {ops["ffMM"] for ops in spec["ops"].values()} == {3}


def test_projections_of_another_width_without_a_per_layer_input_are_a_side_branch(monkeypatch):
    """The same layer whose product is taken with a copy of its per-layer input, made in the
    layer: no product with one of the layer's inputs, so no gate; its projections 32→8→32, in
    children of their own beside the MLP's, are a side branch: measured, booked to `other`
    (unpriced), no part of the MLP's width or matmuls (docs/census.md, "Side branches")."""
    from transformers.models.gemma4 import modeling_gemma4

    from speccat.census import run_census

    forward = modeling_gemma4.Gemma4TextDecoderLayer.forward

    def copied(self, hidden_states, per_layer_input=None, *args, **kwargs):
        return forward(self, hidden_states, per_layer_input.clone(), *args, **kwargs)

    monkeypatch.setattr(modeling_gemma4.Gemma4TextDecoderLayer, "forward", copied)
    spec = run_census(_tiny_gemma4(), name="gemma4-tiny", seq_length=16)
    assert {facts["per_layer_gate_width"] for facts in spec["variants"].values()} == {0}
    assert spec["intermediate_size"] == 64
    for kind, ops in spec["ops"].items():
        assert ops["ffMM"] == 3, kind  # the MLP's gate, up and down
        assert spec["measured"][kind]["bytes_per_token"]["other"] > 0, kind


def test_a_decoder_that_adds_tokens_of_its_own_is_refused():
    """cpmant's forward takes only ids and prepends its prompt tokens: its layers run over more
    tokens than the decoder was given."""
    from bench.bench_registry import default_config
    from speccat.census import run_census

    config = default_config("cpmant")
    config.update(hidden_size=32, dim_ff=64, num_hidden_layers=2, num_attention_heads=2, dim_head=16, vocab_size=64, prompt_length=4)
    with pytest.raises(SpecError, match=r"hidden states \(1, 20\) .* no dim of the 16 tokens") as err:
        run_census(config, name="cpmant-tiny", seq_length=16)
    assert err.value.reason == "unsupported_layer"


@pytest.mark.parametrize("dims", [(1, 16), (16, 1), (16,), (1, 16, 4)])
def test_hidden_states_with_a_dim_of_the_tokens_given_pass(dims):
    """Batch-first, sequence-first, flattened tokens, several streams per token (deepseek_v4's
    hyper-connections): each has a dim of the 16 tokens the decoder was given."""
    from speccat.census.describe.probe_checks import check_tokens
    from speccat.census.measure.layer_probe import LayerProbe

    check_tokens({0: LayerProbe(0, ran=True, hidden_dims=dims)}, 16)


def test_hidden_states_without_the_tokens_given_are_refused_unless_the_layer_never_ran():
    from speccat.census.describe.probe_checks import check_tokens
    from speccat.census.measure.layer_probe import LayerProbe

    check_tokens({0: LayerProbe(0, ran=False)}, 16)  # a cross-attention layer skipped without encoder states
    with pytest.raises(SpecError, match=r"layer 3: its hidden states \(1, 20\)"):
        check_tokens({3: LayerProbe(3, ran=True, hidden_dims=(1, 20))}, 16)
