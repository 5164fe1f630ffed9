"""A kernel added as docs/census.md's "How to add a kernel" says, and nothing else: a toy kernel's
record (census/structure/kernel_registry.py) with a custom op and its fake implementation, a
stand-in, a FLOP formula and a booking, registered for the test only. The census's predicates
find where a toy model calls it, the probe swaps the stand-in in and books what the record says
it keeps, which is what a real CPU forward and backward of the same layer saves, FlopCounterMode
counts its formula, and the registry is as it was afterwards.

The toy kernel is a running sum over the tokens: an fp32 state s_t = Σ_{i≤t} x_i, each token
scaled by it, y_t = x_t·s_t. It keeps its input x and the state, as a recurrence kernel keeps
its input and what it computed.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from math import prod
from types import SimpleNamespace

import pytest
import torch
from support.layer_runs import saves_and_grads
from torch import Tensor, nn

import speccat.census.kernels  # noqa: F401  (registers the census's own kernels)
from speccat.census.build.model import locate
from speccat.census.kernels.scope import kernel_scope
from speccat.census.measure.probe import probe_layers
from speccat.census.structure import predicates
from speccat.census.structure.kernel_registry import CallSeen, Kernel, KernelCall, Keeps, kernel_of, kernels, register, registered, shapes

S, W = 32, 16  # tokens, width
BF16, FP32 = 2, 4


# -- the kernel's module: its op, fake implementation, autograd, stand-in, formula, booking, record


@torch.library.custom_op("speccat_test::running_sum", mutates_args=())
def running_sum(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (b, s, w) → (y_t = x_t·s_t in x's dtype, the fp32 state s (b, s, w), which backward keeps)."""
    state = x.to(torch.float32).cumsum(dim=1)
    return (x.to(torch.float32) * state).to(x.dtype), state


@running_sum.register_fake
def _running_sum_fake(x):
    return torch.empty_like(x), x.new_empty(x.shape, dtype=torch.float32)


def _setup(ctx, inputs, output):
    (x,) = inputs
    _, state = output
    ctx.save_for_backward(x, state)
    ctx.mark_non_differentiable(state)


def _backward(ctx, grad, _grad_state):
    """dx_t = g_t·s_t + Σ_{j≥t} g_j·x_j."""
    x, state = ctx.saved_tensors
    g = grad.to(torch.float32)
    later = (g * x.to(torch.float32)).flip(1).cumsum(1).flip(1)
    return (g * state + later).to(x.dtype)


running_sum.register_autograd(_backward, setup_context=_setup)


def speccat_running_sum(x: Tensor) -> Tensor:
    """The stand-in: the model function's signature, computed by the op in the kernel's scope."""
    with kernel_scope(RUNNING_SUM.name):
        return running_sum(x)[0]


def _flops(x, *args, out_shape=None, **kwargs) -> int:
    return 2 * prod(x)  # an add and a multiply per element


def _book(call: CallSeen) -> KernelCall:
    return KernelCall("running_sum", call.child, shapes(x=call.args[0].shape))


RUNNING_SUM = Kernel(
    op=torch.ops.speccat_test.running_sum.default,
    kind="running_sum",
    book=_book,
    calls=re.compile(r"^toy_kernel_fn$"),
    stand_in=speccat_running_sum,
    keeps=Keeps(outputs="linrec", inputs="attBMM"),  # two ops, to tell which tensor went where
    flops=_flops,
)


# -- the toy model, whose forward calls the kernel by the global name the record matches


def _torch_running_sum(x: Tensor) -> Tensor:
    """What the model calls when no kernel is at hand: the same sum in torch (keeping other tensors)."""
    return (x.to(torch.float32) * x.to(torch.float32).cumsum(dim=1)).to(x.dtype)


toy_kernel_fn = _torch_running_sum


class ToyMixer(nn.Module):
    def forward(self, hidden_states: Tensor) -> Tensor:
        return toy_kernel_fn(hidden_states * 0.5)


class ToyLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.mixer = ToyMixer()

    def forward(self, hidden_states: Tensor) -> Tensor:
        return hidden_states + self.mixer(hidden_states)


class ToyDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(num_hidden_layers=1)
        self.embed_tokens = nn.Embedding(8, W)
        self.layers = nn.ModuleList([ToyLayer()])

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def get_output_embeddings(self) -> None:
        return None

    def forward(self, inputs_embeds: Tensor, use_cache: bool = False) -> tuple[Tensor]:
        hidden = inputs_embeds
        for layer in self.layers:
            hidden = layer(hidden)
        return (hidden,)


@pytest.fixture
def toy_kernel():
    """The toy kernel registered for one test; the registry as it was afterwards, whatever happens."""
    before = kernels()
    with registered(RUNNING_SUM):
        yield RUNNING_SUM
    assert kernels() == before and kernel_of(RUNNING_SUM.op) is None
    assert predicates.kernel_sites(ToyMixer()) == []


def test_the_predicates_find_where_a_module_calls_the_kernel(toy_kernel):
    mixer = ToyMixer()
    home = sys.modules[__name__]
    assert predicates.calls_kernel(mixer, toy_kernel)
    assert predicates.kernel_sites(mixer) == [(toy_kernel, home, "toy_kernel_fn")]
    assert not predicates.calls_kernel(ToyLayer(), toy_kernel)  # the layer itself calls only its mixer


def test_the_probe_books_what_the_record_keeps_as_a_real_run_saves_it_and_counts_its_formula(toy_kernel, monkeypatch):
    with torch.device("meta"):
        decoder = ToyDecoder().to(torch.bfloat16)
    probe = probe_layers(locate(decoder), [0], S, flops=True)[0]
    assert toy_kernel_fn is _torch_running_sum  # the stand-in was put back

    # a real CPU forward and backward of the same layer, the stand-in in place: what autograd saves
    monkeypatch.setattr(sys.modules[__name__], "toy_kernel_fn", speccat_running_sum)
    model = ToyDecoder().to(torch.bfloat16)
    x = torch.randn(1, S, W, dtype=torch.bfloat16, requires_grad=True)
    saved, _ = saves_and_grads(model, model.layers[0], x, square=False)
    real = Counter({t.dtype: t.untyped_storage().nbytes() for t in saved.values()})
    assert real == {torch.bfloat16: S * W * BF16, torch.float32: S * W * FP32}  # the halved input, the fp32 state

    # the state the op made is booked to its record's outputs op, the input it was handed to its inputs op
    assert probe.saved_bytes == {"linrec": real[torch.float32], "attBMM": real[torch.bfloat16]}
    assert probe.kernels == [KernelCall("running_sum", "mixer", shapes(x=(1, S, W)))]
    assert probe.forward_flops == 2 * S * W  # FlopCounterMode counted the formula (the op itself counts 0)


def test_a_second_record_for_an_op_or_a_booking_to_no_op_is_refused(toy_kernel):
    with pytest.raises(ValueError, match="registered already"):
        register(toy_kernel)
    with pytest.raises(ValueError, match="records' vector"):
        register(Kernel(op=torch.ops.aten.cumsum.default, kind="cumsum", book=_book, keeps=Keeps("linrec", "nowhere")))
