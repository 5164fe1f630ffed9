"""A layer that looks itself up by its index in the decoder's stack (census/probe.py
`_index_keyed_subset`): the probe runs the kept layers at their positions in a cut stack, so a
dict their modules hold keyed by the layer indices a config list names (zamba2's shared block:
each hybrid layer's adapter slot, keyed by `hybrid_layer_ids`) is re-keyed by those positions
while they run, each position keeping its layer's own entry, and restored after."""

from __future__ import annotations

import pytest
from torch import nn

from speccat.census.probe import _index_keyed_dicts, probe_layers

# a Mamba2 stack with two hybrid layers (indices 1 and 3) sharing one transformer block, each
# with adapters of its own
ZAMBA2 = {
    "model_type": "zamba2", "hidden_size": 64, "num_hidden_layers": 4, "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_mamba_heads": 2, "mamba_d_state": 16, "mamba_ngroups": 1,
    "intermediate_size": 128, "vocab_size": 256, "use_shared_attention_adapter": True, "adapter_rank": 8, "num_mem_blocks": 1,
}  # fmt: skip


def _built(config):
    from speccat.census.build import build
    from speccat.census.resolve import resolve_config

    top, text, _ = resolve_config(config)
    return build(top, text)


class _Config:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class _Keyed(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.table = table


def test_only_dicts_keyed_by_a_config_list_of_layer_indices_are_found():
    config = _Config(hybrid=[1, 3], sizes=[64, 128], names=["a", "b"], flags=[0, 1, 1, 0])
    keyed, by_size, by_name = _Keyed({1: 0, 3: 1}), _Keyed({64: 0, 128: 1}), _Keyed({"a": 0, "b": 1})
    partial = _Keyed({1: 0})  # keyed by some of the listed indices only: not the list's table
    by_flag = _Keyed({0: "nope", 1: "rope"})  # keyed by a per-layer list's values, which repeat: no layer indices
    private = _Keyed({})
    private._hooks_by_id = {1: None, 3: None}  # torch's own dicts are private attributes, keyed by handle ids
    found = _index_keyed_dicts(config, [nn.ModuleList([keyed, by_size, by_name, partial, by_flag, private])], total=4)
    assert [(module, key) for module, key, _ in found] == [(keyed, "table")]


@pytest.mark.parametrize("index, slot", [(3, 1), (1, 0)])
def test_a_hybrid_layer_runs_at_its_position_with_its_own_adapters(index, slot):
    built = _built(ZAMBA2)
    block = built.layers[index].shared_transformer
    tables = {id(m): dict(m.layer_dic) for m in block.modules() if hasattr(m, "layer_dic")}
    ran = []
    adapters = block.feed_forward.gate_up_proj_adapter_list
    hooks = [adapter.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, adapter in enumerate(adapters)]
    try:
        probe = probe_layers(built, [index], 16)[index]
    finally:
        for hook in hooks:
            hook.remove()
    assert ran == [slot]  # the layer's own adapter slot, though it ran at position 0
    assert sum(probe.saved_bytes.values()) > 0
    assert {id(m): m.layer_dic for m in block.modules() if hasattr(m, "layer_dic")} == tables  # restored
