"""The loss kernels of `catalogue/records/ends.yaml` (`losses:`), measured on a real CPU head.

Each kernel runs a tiny LM head in bf16 (hidden states x of shape (b, s, h), a weight W of shape
(V, h), then the loss) forward and backward, while a torch dispatch mode watches every storage an
op makes. One run gives two numbers:

- kept: the bytes still alive once the forward has returned, less the loss itself. The head's
  input is made inside the watched run and dropped by the caller, so it counts only where the
  loss keeps it for backward, as in a model.
- working: the most bytes alive at any moment of the forward or the backward, less what is kept.
  W's gradient exists before the backward, as on every micro-batch of a step but the first
  (it is priced with the model's states, not with the loss); what autograd makes before adding
  into it counts.

Both are compared with the data file's `keeps` and `working` at the same sizes, one rank and bf16,
with the counts of transformers' causal-LM loss (logit_saved 0, logit_saved_fp32 1). The
fused-linear kernel ships as Triton code, so it runs here as a pure-torch emulation of the same
computation, checked against the eager loss's numbers."""

from __future__ import annotations

import functools
import gc
import math

import pytest
import torch
import torch.nn.functional as F
from support.storage_tracker import StorageTracker
from torch.utils.checkpoint import checkpoint
from transformers.loss.loss_utils import ForCausalLMLoss

from speccat.catalogue.records.ends import load_ends
from speccat.catalogue.records.oprecords import load_records

V, IGNORE = 1000, -100
# (s, b, h): 2 and 3 chunks of 256 tokens; Liger's chunks 32 and 64 tokens at h 64, one chunk of
# every token at h 1024 (V / h rounds up to 1). At h 64 a chunk's fp32 work over the vocabulary is the chunked kernel's peak, at h
# 1024 its weight gradients are, as at every real model's width.
SIZES = [(512, 1, 64), (384, 2, 64), (512, 1, 1024), (384, 2, 1024)]


def shifted(ids: torch.Tensor) -> torch.Tensor:
    """Token i is scored on token i + 1; each sequence's last token on nothing."""
    return F.pad(ids, (0, 1), value=IGNORE)[..., 1:]


def eager(x, W, ids, chunk):
    return ForCausalLMLoss(F.linear(x, W), ids, vocab_size=V)


def chunked(x, W, ids, chunk):
    def chunk_loss(x_chunk, labels_chunk):
        return F.cross_entropy(F.linear(x_chunk, W).float(), labels_chunk, ignore_index=IGNORE, reduction="sum")

    labels, hidden, total = shifted(ids).reshape(-1), x.reshape(-1, x.shape[-1]), 0
    for i in range(0, hidden.shape[0], chunk):
        total = total + checkpoint(chunk_loss, hidden[i:i + chunk], labels[i:i + chunk], use_reentrant=False)
    return total


def liger_chunk(tokens: int, vocab: int, hidden: int) -> int:
    """Liger's tokens a chunk: next_power_of_2(cdiv(tokens, cdiv(vocab, hidden))), at most all."""
    return min(2 ** math.ceil(math.log2(math.ceil(tokens / math.ceil(vocab / hidden)))), tokens)


def row_loss_and_gradient(logits_row: torch.Tensor, label: int) -> torch.Tensor:
    """One token's fp32 loss, its logits overwritten by their gradient (Liger's kernel does this
    per row in registers; here the fp32 row and its softmax live until the return)."""
    if label == IGNORE:
        logits_row.zero_()
        return torch.zeros((), dtype=torch.float32)
    row = logits_row.float()
    grad = torch.softmax(row, 0)
    grad[label] -= 1
    logits_row.copy_(grad)
    return torch.logsumexp(row, 0) - row[label]


class FusedLinearCrossEntropy(torch.autograd.Function):
    """Liger-Kernel's fused linear cross-entropy in pure torch: the loss and both gradients made
    in the forward, a chunk of tokens at a time in one logits buffer that the chunk's gradient
    overwrites; only the two gradients are saved for backward."""

    @staticmethod
    def forward(ctx, x, W, labels):
        tokens, chunk = x.shape[0], liger_chunk(x.shape[0], W.shape[0], x.shape[1])
        grad_input, grad_weight = torch.zeros_like(x), torch.zeros_like(W)
        loss_1d = torch.zeros(tokens, dtype=torch.float32)
        buffer = torch.empty(chunk, W.shape[0], dtype=x.dtype)
        for start in range(0, tokens, chunk):
            x_chunk = x[start:start + chunk]
            logits = torch.mm(x_chunk, W.t(), out=buffer[:x_chunk.shape[0]])
            for r in range(logits.shape[0]):
                loss_1d[start + r] = row_loss_and_gradient(logits[r], int(labels[start + r]))
            torch.mm(logits, W, out=grad_input[start:start + chunk])
            grad_weight.addmm_(logits.t(), x_chunk)
        ctx.save_for_backward(grad_input, grad_weight)
        return loss_1d.sum()

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors  # scaled in place, as Liger's backward does
        if grad_output.item() != 1.0:
            grad_input.mul_(grad_output)
            grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None


def fused_linear(x, W, ids, chunk):
    return FusedLinearCrossEntropy.apply(x.reshape(-1, x.shape[-1]), W, shifted(ids).reshape(-1))


KERNELS = {"eager": eager, "chunked": chunked, "fused-linear": fused_linear}
CASES = [(kernel, *size) for kernel in KERNELS for size in SIZES]


@functools.cache
def losses():
    return load_ends(load_records()).losses


def chunk_tokens() -> int:
    return int(losses()["chunked"].chunk)


def inputs(s: int, b: int, h: int):
    torch.manual_seed(0)
    W = torch.nn.Parameter(torch.randn(V, h, dtype=torch.bfloat16) * 0.05)
    x0 = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    return W, x0, torch.randint(0, V, (b, s))


@functools.cache
def measure(kernel: str, s: int, b: int, h: int) -> tuple[int, int, list]:
    """(kept, working, the first shape of each storage kept) of one forward and backward."""
    W, x0, ids = inputs(s, b, h)
    W.grad = torch.zeros_like(W)  # a later micro-batch of the step: the gradient is being summed into
    tracker = StorageTracker([W, W.grad, x0, ids])
    with tracker:
        x = x0 * 1  # the head's input, made inside the watched run
        loss = KERNELS[kernel](x, W, ids, chunk_tokens())
        del x
    gc.collect()
    kept = tracker.alive() - {tracker.serial(loss)}
    with tracker:
        loss.backward()
    peak = max(tracker.bytes(alive) for alive in tracker.timeline)
    return tracker.bytes(kept), peak - tracker.bytes(kept), [tracker.shape[i] for i in kept]


def priced(kernel: str, s: int, b: int, h: int) -> tuple[float, float]:
    """The data file's (keeps, working) at these sizes, one rank, bf16."""
    loss = losses()[kernel]
    names = {"s": s, "b": b, "h": h, "V": V, "t": 1, "cp": 1, "bytes_compute": 2, "logit_saved": 0, "logit_saved_fp32": 1,
             "head_input_fp32": 0, "head_weight_fp32": 0, "vocab_vectors_fp32": 0}  # a plain bf16 head
    if loss.chunk is not None:
        names["chunk"] = loss.chunk
    return float(loss.keeps(names)), float(loss.working(names))


@pytest.mark.parametrize(("s", "b", "h"), SIZES)
def test_the_sizes_run_several_chunks(s, b, h):
    assert s * b > chunk_tokens()
    # next_power_of_2(cdiv(T, cdiv(1000, h))), at most T: cdiv(1000, 64) = 16, cdiv(1000, 1024) = 1
    assert liger_chunk(s * b, V, h) == {(512, 1, 64): 32, (384, 2, 64): 64, (512, 1, 1024): 512, (384, 2, 1024): 768}[(s, b, h)]


@pytest.mark.parametrize(("kernel", "s", "b", "h"), CASES)
def test_kept_is_priced_to_the_byte(kernel, s, b, h):
    assert measure(kernel, s, b, h)[0] == priced(kernel, s, b, h)[0]


@pytest.mark.parametrize(("kernel", "s", "b", "h"), CASES)
def test_working_is_priced(kernel, s, b, h):
    working, priced_working = measure(kernel, s, b, h)[1], priced(kernel, s, b, h)[1]
    if kernel == "fused-linear":
        # On top: the emulation's per-row fp32 temporaries (a row upcast and its softmax, 2*V*4
        # bytes, which Liger's kernel holds in registers) and the int64 shifted labels (8 bytes a
        # token, alive through the forward, which the price leaves out).
        assert priced_working <= working <= priced_working + 4 * V * 4
    elif kernel == "chunked" and (s, b) == (512, 1) and h == 1024:
        # The price's upper bound: here autograd releases the head's input and the padded labels
        # (kept bytes) before it sums the last chunk's weight gradient, so the peak is that less.
        assert working == priced_working - (s * b * h * 2 + (s + 1) * 8) + 8
    else:
        assert working == pytest.approx(priced_working, rel=0.01)


@pytest.mark.parametrize(("s", "b", "h"), SIZES)
def test_only_eager_keeps_a_tensor_over_tokens_and_vocabulary(s, b, h):
    for kernel in KERNELS:
        kept = [shape for shape in measure(kernel, s, b, h)[2] if V in shape and {s, s * b} & set(shape)]
        assert kept == ([(s * b, V)] if kernel == "eager" else [])  # eager: its fp32 log-probabilities


def test_eager_kept_worked_by_hand():
    """eager at s=512, b=1: the head's input (512 x 64, bf16), the fp32 log-probabilities
    (512 x 1000), the int64 shifted labels with their pad (at b=1 the shifted slice is already
    contiguous, so the padded 1 x 513 tensor itself is kept) and the fp32 count of scored tokens
    that the mean's backward divides by (nll_loss's total weight, a 4-byte scalar)."""
    by_hand = 512 * 64 * 2 + 512 * 1000 * 4 + 513 * 8 + 4
    assert by_hand == 512 * (64 * 2 + 1000 * 4 + 8) + 8 + 4 == 2_117_644
    assert measure("eager", 512, 1, 64)[0] == by_hand


def test_chunked_working_at_width_1024_worked_by_hand():
    """chunked at s=384, b=2, h=1024 (three chunks): the head input's gradient (768 x 1024, bf16)
    filling in beside autograd's sum of the head weight's gradient so far, the next chunk's and
    their new sum (each 1000 x 1024, bf16) and that chunk's input gradient (256 x 1024), plus the
    chunk's 4-byte loss and count; twice eager's whole working set over the vocabulary is
    smaller than this at any real width."""
    by_hand = 768 * 1024 * 2 + 3 * 1000 * 1024 * 2 + 256 * 1024 * 2 + 8
    assert measure("chunked", 384, 2, 1024)[1] == by_hand


def gradients(kernel: str, s: int, b: int):
    """(the loss summed over the scored tokens, x's gradient, W's gradient), unwatched."""
    W, x0, ids = inputs(s, b, 64)
    loss = KERNELS[kernel](x0, W, ids, chunk_tokens())
    if kernel == "eager":  # transformers' loss is the mean over the scored tokens
        loss = loss * (shifted(ids) != IGNORE).sum()
    loss.backward()
    return loss.detach(), x0.grad, W.grad


@pytest.mark.parametrize("kernel", ["chunked", "fused-linear"])
def test_kernels_compute_the_eager_loss_and_gradients(kernel):
    """transformers' numbers to bf16's precision: the same computation in another order."""
    (loss, x_grad, w_grad), (want_loss, want_x, want_w) = gradients(kernel, 384, 2), gradients("eager", 384, 2)
    torch.testing.assert_close(loss, want_loss, rtol=1e-3, atol=0)
    torch.testing.assert_close(x_grad, want_x, rtol=2e-2, atol=1e-3)
    # W's gradient is summed chunk by chunk in bf16 (2^-8 relative a rounding), eager's in one product
    torch.testing.assert_close(w_grad, want_w, rtol=2e-2, atol=2e-2 * want_w.abs().max().item())
