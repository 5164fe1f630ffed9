"""Layers that read the keys and values an earlier layer stored (gemma3n's last
`num_kv_shared_layers` layers; docs/census.md, "Layers reading another layer's keys and values"):
the probe runs such a layer with the layer it reads from (census/measure/readers.py tells which), and
books the shared keys and values to the layer that made and first kept them, never twice.

Checked against a real CPU forward and backward of a tiny gemma3n_text's pair of layers (the
source, then the layer reading its keys and values, through speccat's attention kernel), storage
by storage.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from support.layer_runs import signature

S, H, A, KV, D, W, P = 32, 64, 4, 2, 16, 128, 16  # tokens, hidden, heads, kv heads, head dim, MLP width, per-layer input width
STREAMS = 4  # AltUp's hidden-state streams
BF16, FP32 = 2, 4
TINY_GEMMA3N = {
    "model_type": "gemma3n_text", "hidden_size": H, "intermediate_size": [W] * 4, "num_hidden_layers": 4,
    "num_attention_heads": A, "num_key_value_heads": KV, "head_dim": D, "vocab_size": 128, "vocab_size_per_layer_input": 64,
    "hidden_size_per_layer_input": P, "laurel_rank": 8, "altup_num_inputs": STREAMS, "num_kv_shared_layers": 2,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"], "sliding_window": 16,
    "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0], "max_position_embeddings": 256, "torch_dtype": "bfloat16",
}  # fmt: skip
SOURCE, READER = 0, 2  # layer 2 (sliding) reads the keys and values layer 0 (the last sliding layer before the shared ones) stores


def _built():
    from transformers import CONFIG_MAPPING

    from speccat.census.build import model as build

    from speccat.census.intake import remote
    from speccat.census.intake.resolve import resolve_config

    top, text, _ = resolve_config(remote.resolve(TINY_GEMMA3N, CONFIG_MAPPING))
    return build.build(top, text)


@pytest.fixture(scope="module")
def probed():
    """The census's probe of the reading layer alone, and of every layer, on one built model."""
    from speccat.census.measure.probe import probe_layers

    built = _built()
    alone = probe_layers(built, [READER], S)
    every = probe_layers(built, [0, 1, 2, 3], S)
    return built, alone, every


def _pair_saves():
    """A real bf16 forward and backward of the source layer, then the reading layer, handed the
    same `shared_kv_states` as the decoder hands them: (each layer's saved storages, by storage;
    the parameters, buffers, rotary tables, per-layer inputs and the last output left out, as
    the census leaves them out: a layer's hidden-states input counts where the layer keeps it)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.cache_utils import KVSharingDict

    import speccat.census.kernels.attention  # noqa: F401  (registers `speccat` with transformers)

    config = AutoConfig.for_model(**{k: v for k, v in TINY_GEMMA3N.items() if k != "torch_dtype"})
    config._attn_implementation = "speccat"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).train()
    decoder = model.model
    position_ids = torch.arange(S).unsqueeze(0)
    x = torch.randn(STREAMS, 1, S, H, dtype=torch.bfloat16, requires_grad=True)
    shared = KVSharingDict()
    saved: dict[int, dict[int, torch.Tensor]] = {SOURCE: {}, READER: {}}
    running = [SOURCE]

    def pack(t):
        saved[running[0]].setdefault(t.untyped_storage()._cdata, t)
        return t

    given, hidden = [], x
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for index in (SOURCE, READER):
            running[0] = index
            layer_type = config.layer_types[index]
            rope = decoder.rotary_emb(hidden, position_ids, layer_type)
            per_layer = torch.randn(1, S, P, dtype=torch.bfloat16, requires_grad=True)
            given += [*rope, per_layer]
            hidden = decoder.layers[index](hidden, rope, per_layer, shared_kv_states=shared, attention_mask=None, position_ids=position_ids)
    given.append(hidden)
    hidden.float().square().sum().backward()
    assert x.grad is not None and decoder.layers[SOURCE].self_attn.k_proj.weight.grad is not None  # the reader's gradient reached the source's keys
    left_out = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers(), *given)}
    return {index: {k: t for k, t in kept.items() if k not in left_out} for index, kept in saved.items()}


def test_the_probe_runs_a_reading_layer_with_the_layer_it_reads_from(probed):
    built, alone, every = probed
    assert built.sources == {2: {0}, 3: {1}}  # told by running the stack, not by a name
    assert list(alone) == [READER]  # the source ran, but is not handed back as probed
    assert alone[READER].saved_bytes == every[READER].saved_bytes


def test_a_reading_layer_books_what_it_keeps_and_not_the_shared_keys_and_values(probed):
    _, _, every = probed
    real = _pair_saves()
    source_keys = set(real[SOURCE])
    own = [t for k, t in real[READER].items() if k not in source_keys]
    shared = [t for k, t in real[READER].items() if k in source_keys]
    bf16 = torch.bfloat16
    # what the reader's attention kernel keeps of the source's: its keys and values (after
    # k_norm, v_norm and rope), the same storages the source's own kernel call keeps
    assert signature(shared) == signature([torch.empty(1, KV, S, D, dtype=bf16)] * 2)
    # the census books the reader what it keeps of its own, byte for byte
    assert sum(every[READER].saved_bytes.values()) == sum(t.untyped_storage().nbytes() for t in own)
    assert sum(every[SOURCE].saved_bytes.values()) == sum(t.untyped_storage().nbytes() for t in real[SOURCE].values())
    # and the reader's attention keeps q only (the source keeps q, k and v), its own norms
    # without k_norm's and v_norm's saves
    assert every[READER].saved_bytes["attBMM"] == 2 * A * S * D
    assert every[SOURCE].saved_bytes["attBMM"] == 2 * (A + 2 * KV) * S * D
    # storage by storage: the same storages (the last two dims and dtype of the tensor that
    # first kept each) for both layers in both runs
    for index, kept in ((READER, own), (SOURCE, list(real[SOURCE].values()))):
        booked = Counter()
        for (_, tail, dtype), n in every[index].kept_tails.items():
            booked[tail, dtype] += n
        assert booked == Counter((tuple(t.shape[-2:]), t.dtype) for t in kept), index


@pytest.fixture(scope="module")
def spec():
    from speccat.census import run_census

    return run_census(TINY_GEMMA3N, name="tiny-gemma3n", seq_length=S)


def test_the_reading_layers_are_a_kind_of_their_own_that_keeps_no_keys_and_values(spec):
    # layer 0 runs the activation sparsity (its own kind), layer 1 keeps its own keys and
    # values, layers 2 and 3 read layer 0's and layer 1's (window 16 < 32 tokens: the sliding
    # reader keeps what the full one keeps under the census's kernel, and is a kind apart by its
    # window, as sdpa keeps its mask beside)
    assert spec["layers"] == [
        {"kind": "sliding_dense", "count": 1}, {"kind": "full_dense", "count": 1},
        {"kind": "sliding_dense_kv_shared", "count": 1}, {"kind": "full_dense_kv_shared", "count": 1},
    ]  # fmt: skip
    assert {kind: v["kv_shared"] for kind, v in spec["variants"].items()} == {
        "sliding_dense": False, "full_dense": False, "sliding_dense_kv_shared": True, "full_dense_kv_shared": True,
    }  # fmt: skip
    assert spec["variants"]["sliding_dense_kv_shared"]["attention_window"] == 16
    assert spec["measured"]["sliding_dense_kv_shared"] == spec["measured"]["full_dense_kv_shared"]
    own, reads = spec["measured"]["full_dense"]["bytes_per_token"], spec["measured"]["full_dense_kv_shared"]["bytes_per_token"]
    assert own["attBMM"] - reads["attBMM"] == BF16 * 2 * KV * D  # k and v
    assert {op: n for op, n in own.items() if n != reads[op]}.keys() == {"attBMM", "normOp"}  # and k_norm's and v_norm's saves



def test_the_records_price_a_reading_kind_without_its_keys_and_values(spec):
    """The records' price of the reading kind is the owning kind's less k and v (kv heads ×
    head dim each, bf16), k_norm's saves (gemma's norm upcasts and scales in fp32: fp32
    input and normalised input per element, one fp32 statistic per kv head) and the weightless
    v_norm's (its fp32 input and one fp32 statistic per kv head). What AltUp and Laurel keep,
    booked `other`, the records price in both alike (tests/census/test_census_altup.py)."""
    from support.layer_runs import priced_vs_measured

    priced = priced_vs_measured(spec, S)
    k_norm = (FP32 + FP32) * KV * D + FP32 * KV
    v_norm = FP32 * KV * (D + 1)
    assert priced["full_dense"][0] - priced["full_dense_kv_shared"][0] == BF16 * 2 * KV * D + k_norm + v_norm
    assert all(spec["measured"][kind]["bytes_per_token"]["other"] > 0 for kind in priced)  # the side branches'
    assert {kind: spec["variants"][kind]["side_code_bytes"] for kind in priced} == {kind: BF16 * (2 * STREAMS + 1) for kind in priced}
