"""A module built on meta made fake (census/build/fake.py) is what `to_empty` under the same mode
makes of it, and the probe's backward (census/measure/probe.py) runs through every probed layer back to
the decoder's input, without the weights' own gradients."""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from speccat.census.build.fake import fake_mode_of, make_fake, make_meta_fake, on_meta

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip


class _Held(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 10, dtype=torch.bfloat16)
        self.frozen = nn.Parameter(torch.empty(3, 4), requires_grad=False)
        self.register_buffer("table", torch.empty(5, 7, dtype=torch.float32))
        self.register_buffer("columns", torch.empty(7, 5).t())  # not contiguous: its layout is kept


def _meta() -> nn.Module:
    with torch.device("meta"):
        return _Held()


def _facts(module: nn.Module) -> dict:
    return {
        name: (type(t).__name__ if not isinstance(t, nn.Parameter) else "Parameter", isinstance(t, FakeTensor), str(t.device), tuple(t.shape), t.stride(), t.dtype, t.requires_grad)
        for name, t in (*module.named_parameters(), *module.named_buffers())
    }


def test_made_fake_is_what_to_empty_makes_under_the_same_mode():
    ours, theirs = _meta(), _meta()
    make_fake(ours, FakeTensorMode(allow_non_fake_inputs=True))
    with FakeTensorMode(allow_non_fake_inputs=True):
        theirs.to_empty(device="cpu")
    assert _facts(ours) == _facts(theirs)
    facts = _facts(ours)
    assert facts["proj.weight"] == ("Parameter", True, "cpu", (10, 6), (6, 1), torch.bfloat16, True)
    assert facts["frozen"][-1] is False
    assert facts["columns"][3:5] == ((5, 7), (1, 5))  # the transposed layout, as empty_like keeps it


def test_only_what_is_still_on_meta_is_made_fake_and_the_mode_is_read_back():
    module = _meta()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    make_fake(module.proj, mode)
    weight = module.proj.weight
    assert on_meta(module) and not on_meta(module.proj)
    make_meta_fake(module, mode)
    assert module.proj.weight is weight  # made fake before: untouched
    assert not any(t.is_meta for t in (*module.parameters(), *module.buffers()))
    assert fake_mode_of(module) is mode
    with torch.device("meta"):
        assert fake_mode_of(nn.Linear(2, 2)) is None


def test_the_probe_runs_every_layer_backward_to_the_input_without_weight_gradients():
    from speccat.census.build.model import build
    from speccat.census.measure.probe import probe_layers
    from speccat.census.intake.resolve import resolve_config

    top, text, _ = resolve_config(LLAMA)
    built = build(top, text)
    reached: list[int] = []
    handles = [layer.register_full_backward_hook(lambda module, grad_in, grad_out, i=i: reached.append(i)) for i, layer in enumerate(built.layers)]
    try:
        probes = probe_layers(built, [0, 2], 32)
    finally:
        for handle in handles:
            handle.remove()
    assert sorted(probes) == [0, 2]
    assert sorted(reached) == [0, 2]  # both probed layers' backward ran, back to their inputs
    assert all(p.grad is None for layer in (built.layers[0], built.layers[2]) for p in layer.parameters())
    assert all(isinstance(p, FakeTensor) for p in built.layers[2].parameters())
    assert all(p.is_meta for p in built.layers[1].parameters())  # not probed: left on meta
