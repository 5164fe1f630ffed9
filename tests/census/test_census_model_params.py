"""The census's whole-model parameter parts count every parameter of the text path
(census/measure/outside_params.py): what it reads outside its layers besides the word embedding,
head and final norm (gpt2's learned position embedding, bert's token-type embeddings, embedding
norm and head transform, gemma3n's per-layer embeddings and AltUp projections) is
`embedding_extra` (before the stack) or `head_extra` (after it), so the census's total is the
built text model's; a multimodal model's towers, which a text forward never runs, are not
counted; and the planner puts each extra on its pipeline stage (`speccat fit`'s weights)."""

from __future__ import annotations

import pytest
from conftest import load_shipped
from transformers import CONFIG_MAPPING

from speccat.catalogue.records.candidates import Layout
from speccat.catalogue.records.states import total_params
from speccat.census.build.model import build
from speccat.census.intake import remote
from speccat.census.intake.resolve import resolve_config

SEQ = 64
GPT2 = "openai-community/gpt2"


def census(config: dict, name: str) -> dict:
    from speccat.census import run_census

    return run_census(config, name=name, seq_length=SEQ).to_dict()


def built_model(config: dict):
    """The model the census builds for `config`, on meta (transformers' own classes)."""
    top, text, _ = resolve_config(remote.resolve(config, CONFIG_MAPPING))
    return build(top, text).model


def counted(spec: dict) -> int:
    params = spec["params"]
    whole = sum(params[part] for part in ("embedding", "output", "final_norm", "embedding_extra", "head_extra"))
    return whole + sum(group["count"] * sum(params["kinds"][group["kind"]].values()) for group in spec["layers"])


def numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_gpt2_counts_its_position_embedding():
    config = load_shipped(GPT2)
    spec = census(config, "gpt2")
    h, vocab, positions, layers = config["n_embd"], config["vocab_size"], config["n_positions"], config["n_layer"]
    # by hand: wte (tied to the head), wpe, ln_f; a layer's two LayerNorms (2h each), c_attn
    # (h × 3h + 3h), c_proj (h² + h), c_fc (h × 4h + 4h), mlp c_proj (4h × h + h): 12h² + 13h
    assert spec["params"]["embedding_extra"] == positions * h == 786_432
    assert (spec["params"]["embedding"], spec["params"]["output"], spec["params"]["final_norm"], spec["params"]["head_extra"]) == (vocab * h, 0, 2 * h, 0)
    by_hand = vocab * h + positions * h + 2 * h + layers * (12 * h * h + 13 * h)
    assert counted(spec) == total_params(spec) == by_hand == numel(built_model(config)) == 124_439_808  # gpt2's published 124 M


def test_bert_counts_its_embedding_extras_and_head_transform():
    config = CONFIG_MAPPING["bert"]().to_dict()  # bert-base's dims
    spec = census(config, "bert")
    h, vocab, positions, types = config["hidden_size"], config["vocab_size"], config["max_position_embeddings"], config["type_vocab_size"]
    # before the stack: position and token-type embeddings and the embedding LayerNorm; after it,
    # the LM head's transform (dense h × h + h, LayerNorm 2h); the decoder's bias is the output
    assert spec["params"]["embedding_extra"] == positions * h + types * h + 2 * h
    assert spec["params"]["head_extra"] == h * h + h + 2 * h
    assert (spec["params"]["output"], spec["params"]["final_norm"]) == (vocab, 0)
    assert counted(spec) == numel(built_model(config))


def test_gemma3n_counts_its_per_layer_embeddings():
    config = CONFIG_MAPPING["gemma3n_text"]().to_dict()
    spec = census(config, "gemma3n_text")
    h, layers, per_layer, vocab = config["hidden_size"], config["num_hidden_layers"], config["hidden_size_per_layer_input"], config["vocab_size_per_layer_input"]
    streams = config["altup_num_inputs"]
    # before the stack: the per-layer embedding table (vocab × layers·per_layer), its projection
    # from the hidden states (h × layers·per_layer), and AltUp's projections of the hidden states
    # into the other streams ((streams − 1) × h²), and the per-layer projection's norm (per_layer:
    # a norm beside the stack, but run before it, so not the final norm); after it, AltUp's
    # projections back ((streams − 1) × h²)
    assert spec["params"]["embedding_extra"] == vocab * layers * per_layer + h * layers * per_layer + (streams - 1) * h * h + per_layer
    assert vocab * layers * per_layer == 2_348_810_240  # the 2.35 B of per-layer embeddings
    assert spec["params"]["final_norm"] == h
    assert spec["params"]["head_extra"] == (streams - 1) * h * h
    assert counted(spec) == numel(built_model(config))


def test_a_multimodal_models_towers_are_not_counted():
    config = CONFIG_MAPPING["phi4_multimodal"]().to_dict()
    spec = census(config, "phi4_multimodal")
    model = built_model(config)
    # the image and audio towers sit inside the language model (its embedding module holds them)
    # but run only on images and audio, never on token ids alone
    towers = [m for name, m in model.named_modules() if name.endswith(("embed_tokens_extend.image_embed", "embed_tokens_extend.audio_embed"))]
    assert len(towers) == 2 and all(numel(t) > 0 for t in towers)
    assert counted(spec) == numel(model) - sum(numel(t) for t in towers)
    assert spec["params"]["embedding_extra"] == spec["params"]["head_extra"] == 0


def test_the_planner_holds_gpt2s_position_embedding_on_its_first_stage():
    """speccat fit's weights (the planner's SQL, rank_stages): the position embedding is on the
    first stage with the word embedding, replicated over tp (states.yaml: embedding_extra)."""
    from support.rank_stages import stage_states

    config = load_shipped(GPT2)
    spec = census(config, "gpt2")
    params = spec["params"]
    kind = params["kinds"]["decoder"]
    h, vocab, positions, layers = config["n_embd"], config["vocab_size"], config["n_positions"], config["n_layer"]
    assert kind["norm"] == 4 * h  # two LayerNorms, weight and bias
    first, last = stage_states(spec, Layout(pp=2, tp=2))  # 6 layers each; the last holds the final norm and a copy of the tied embedding
    # a layer at tp 2: its projections halved, its norms whole (replicated); the word embedding
    # (and its tied copy) vocab-parallel, halved; the position embedding and final norm whole
    stage_layers = layers // 2 * ((sum(kind.values()) - kind["norm"]) / 2 + kind["norm"])
    assert first["weight"] == pytest.approx(2 * (vocab * h / 2 + positions * h + stage_layers), rel=1e-12)
    assert last["weight"] == pytest.approx(2 * (vocab * h / 2 + 2 * h + stage_layers), rel=1e-12)
