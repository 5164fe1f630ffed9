"""Probing: one layer of each distinct shape run forward and backward on fake tensors, and
watched (docs/census.md, "How a config becomes a spec", step 4, and "Measured bytes").

The decoder's own forward runs (so masks, rotary positions, 3-axis positions and per-layer-type
rope are exactly what transformers gives a layer), but with only the probed layers in its stack
(census/measure/layer_subset.py), converted from meta to fake tensors. While it runs, a Watcher
(census/measure/watcher.py) sees every op, every module the layers run and every tensor
autograd keeps; after the forward what backward can still reach is booked
(census/measure/booking.py).

The kernels are the registered ones (census/structure/kernel_registry.py): each function of a
layer's forward that a kernel stands in for is pointed at its stand-in while the layers run
(census/measure/kernel_stand_ins.py), each call of a kernel's op is booked as its record's `book`
says, and what is saved while its stand-in runs as its `keeps` says.

What one layer did is its `LayerProbe` (census/measure/layer_probe.py). Nothing here is global:
hooks are removed, the swapped kernel functions restored and the modes popped when the probe
ends, whatever happens.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode

from speccat.census.kernels import attention
from speccat.census.build import inputs
from speccat.census.measure import readers
from speccat.census.build.model import BUILD_DTYPE, Built
from speccat.census.measure.backward_peak import BackwardPeak, working_set
from speccat.census.measure.booking import book_bytes
from speccat.census.measure.flops import LayerFlops
from speccat.census.measure.inline_activations import mark_inline_activations
from speccat.census.measure.kernel_fallback import refuse_fallbacks
from speccat.census.measure.kernel_stand_ins import kernels_swapped
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.measure.layer_subset import config_subset, index_keyed_subset, index_lists_subset
from speccat.census.measure.model_code import ModelCodeError, failing_model_code, model_code
from speccat.census.measure.watcher import DispatchWatch, Watcher, unpack
from speccat.census.measure.expert_counts import assumed_routing
from speccat.census.build.fake import fake_mode_of, make_fake, make_meta_fake
from speccat.census.kernels.routing import route_attention
from speccat.census.spec import SpecError


def probe_layers(
    built: Built,
    indices: list[int],
    seq_length: int,
    fake_mode: FakeTensorMode | None = None,
    backward: bool = True,
    encoder_tokens: int = 0,
    flops: bool = False,
) -> dict[int, LayerProbe]:
    """Probe the layers `indices`: the decoder forward and backward with only them in its stack, on fake tensors.

    The model is on meta and its needed parts are converted to fake tensors, unless `fake_mode`
    is given: then the model was built under that mode and is fake already. Without
    `backward`, the saved bytes are booked after the forward alone (a second measurement of
    layers whose backward the census has run). With `encoder_tokens`, the decoder is also given
    encoder states of that many tokens (encoder_input names its argument). With `flops`, each
    probe's `forward_flops` is counted in the same forward (census/measure/flops.py).
    """
    return run_layers(built, indices, seq_length, Watcher, fake_mode=fake_mode, backward=backward, encoder_tokens=encoder_tokens, flops=flops).probes


# The names under which a decoder's forward takes encoder states (mllama's text model:
# cross_attention_states; an encoder-decoder's decoder: encoder_hidden_states).
ENCODER_INPUTS = ("cross_attention_states", "encoder_hidden_states")


def encoder_input(module: nn.Module) -> str | None:
    """The argument of `module`'s forward that takes encoder states, or None."""
    try:
        takes = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in ENCODER_INPUTS if name in takes), None)


def run_layers(
    built: Built,
    indices: list[int],
    seq_length: int,
    make_watcher: Callable[[dict[int, nn.Module], set[int]], Watcher],
    around: Callable[[dict[int, nn.Module], Watcher], contextlib.AbstractContextManager] | None = None,
    fake_mode: FakeTensorMode | None = None,
    backward: bool = True,
    encoder_tokens: int = 0,
    flops: bool = False,
) -> Watcher:
    """Run the decoder with only the layers `indices` in its stack, watched by `make_watcher(...)`.

    Plain probing (no `around`) books what backward can reach after the forward and runs the
    backward; with `around` (a context wrapping the layers' forwards, census/measure/recompute.py) the
    forward alone runs and the watcher counts. With `flops`, FlopCounterMode counts the forward
    (below the watcher's dispatch mode, so the watcher sees the ops as they were called) and
    each probe gets its layer's FLOPs.

    The decoder runs the first of census/build/inputs.py's ways that its own code does not fail
    (`ModelCodeError`), tried in turn on a model's first run; the way that worked is kept on
    `built` for every later run. When every way fails, the first way's error is raised, with
    the last's.
    """
    args = (seq_length, make_watcher, around, fake_mode, backward, encoder_tokens, flops)
    try:
        watcher = _run_some_way(built, readers.with_sources(indices, built.sources or {}), *args)
    except ModelCodeError:
        if built.sources is not None or len(indices) == len(built.layers):
            raise
        built.sources = _find_sources(built, seq_length)
        wider = readers.with_sources(indices, built.sources)
        if wider == sorted(indices):
            raise
        watcher = _run_some_way(built, wider, *args)
    if any(probe.reads_depth for probe in watcher.probes.values()):
        # layers that read the states stored down the stack's depth run with every layer before them
        built.sources = readers.with_earlier(built.sources or {}, len(built.layers))
        wider = readers.with_sources(indices, built.sources)
        if wider != sorted(watcher.probes):
            watcher = _run_some_way(built, wider, *args)
    # the layers run only for what they store (a source another probed layer reads) are not probed
    watcher.probes = {index: watcher.probes[index] for index in indices}
    return watcher


def _run_some_way(built: Built, indices: list[int], *args: Any) -> Watcher:
    """_run_layers, the way kept on `built`, else each of census/build/inputs.py's ways in turn."""
    run = functools.partial(_run_layers, built, indices, *args)
    if built.way is not None:
        return run(built.way)
    tried = inputs.ways(built.decoder)
    first = None
    for way in tried:
        try:
            watcher = run(way)
        except ModelCodeError as err:
            first = first or err
            last = err
            continue
        built.way = way
        return watcher
    if last is first:
        raise first
    raise ModelCodeError(first.reason, f"{first}; {tried[-1].words()}: {last}") from last


def _find_sources(built: Built, seq_length: int) -> dict[int, set[int]]:
    """Which earlier layers each layer reads from (census/measure/readers.py): the decoder's forward
    with its whole stack, watched, the first of census/build/inputs.py's ways that runs; {} when none
    does (the probe's own error stands then)."""
    decoder = built.decoder
    every = list(range(len(built.layers)))
    fake_mode = fake_mode_of(decoder) or FakeTensorMode(allow_non_fake_inputs=True)
    make_meta_fake(decoder, fake_mode)
    for way in inputs.ways(decoder):
        tracker = readers.StoredReads(built.layers)
        try:
            with fake_mode, torch.no_grad(), config_subset(built.config, every, len(every), way.probed_count), kernels_swapped(dict(enumerate(built.layers))), route_attention(seq_length), assumed_routing(built.layers), tracker.hooks():
                decoder(use_cache=False, **inputs.decoder_inputs(way.feed, built.embedding, seq_length))
        except Exception:  # the model's code fails this way too: the next
            continue
        return readers.with_earlier(tracker.sources, len(every)) if tracker.depth else tracker.sources
    return {}


def _run_layers(
    built: Built,
    indices: list[int],
    seq_length: int,
    make_watcher: Callable[[dict[int, nn.Module], set[int]], Watcher],
    around: Callable[[dict[int, nn.Module], Watcher], contextlib.AbstractContextManager] | None,
    fake_mode: FakeTensorMode | None,
    backward: bool,
    encoder_tokens: int,
    flops: bool,
    way: inputs.Way,
) -> Watcher:
    """run_layers, the decoder run `way` (census/build/inputs.py)."""
    decoder = built.decoder
    config = built.config
    total = len(built.layers)
    holder, stack_name = built.stack.parent
    kept = {index: built.layers[index] for index in indices}
    setattr(holder, stack_name, nn.ModuleList([kept[i] for i in indices]))  # the decoder now holds only the kept layers
    try:
        fake_mode = fake_mode or fake_mode_of(decoder)
        if fake_mode is None:
            fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
            make_fake(decoder, fake_mode)
        for layer in kept.values():  # layers an earlier probe of this decoder left on meta (run now with the layers after them)
            make_meta_fake(layer, fake_mode)
        for layer in kept.values():
            mark_inline_activations(layer)
        # Held alive through the forward: a model may replace a buffer as it runs (ctrl casts its
        # pos_encoding and assigns the copy), and a dead storage's identity can be taken by an
        # activation, which would then be left out as a parameter.
        fixed = [t.untyped_storage() for t in (*decoder.parameters(), *decoder.buffers())]
        watcher = make_watcher(kept, {storage._cdata for storage in fixed})
        watcher.seq_length = seq_length
        watcher.kept.extend(fixed)
        wrapped = around(kept, watcher) if around is not None else contextlib.nullcontext()
        # Everything alive now (the model, transformers, torch) is not this forward's garbage:
        # frozen, the collection after the forward scans only what the forward made (a full
        # collection of the whole heap costs ~0.2 s, most of a probe).
        gc.freeze()
        peak = BackwardPeak(watcher) if around is None and backward else None
        with fake_mode, config_subset(config, indices, total, way.probed_count), index_lists_subset(config, decoder, indices), index_keyed_subset(config, kept, indices, total), kernels_swapped(kept), watcher.hooks(), peak.windows(kept) if peak else contextlib.nullcontext(), wrapped:
            width = built.embedding.weight.shape[1]
            extra = inputs.decoder_inputs(way.feed, built.embedding, seq_length)
            if encoder_tokens:  # encoder states of the layers' width (mllama's projected vision tokens), trained through
                name = encoder_input(decoder)
                if name is None:
                    raise SpecError("unsupported_layer", f"{type(decoder).__name__}: its forward takes no encoder states ({', '.join(ENCODER_INPUTS)})")
                extra[name] = torch.empty(1, encoder_tokens, width, dtype=built.embedding.weight.dtype, requires_grad=True)
            counted = LayerFlops(decoder) if flops else None
            with counted.counting() if counted else contextlib.nullcontext(), DispatchWatch(watcher), torch.autograd.graph.saved_tensors_hooks(watcher.pack, unpack), route_attention(seq_length, watcher.note_linear_attention), assumed_routing(kept.values()), attention.eager_seen(watcher.note_eager_attention, watcher.note_depth_attention):
                output = decoder(use_cache=False, **extra)
            watcher.forward_done = True
            refuse_fallbacks(watcher.fallbacks)
            if counted:
                for index, layer in kept.items():
                    watcher.probes[index].forward_flops = counted.of(layer)
            hidden_out = output[0] if isinstance(output, tuple) else output.last_hidden_state
            del output
            gc.collect()  # graph nodes no output reaches are freed now, with what they saved
            if around is not None:
                watcher.count()
                return watcher
            book_bytes(watcher)
            if backward:
                # back to the stack's input: every probed layer's backward runs (each kernel's
                # too); the weights' own gradients, which read only what the forward saved, are
                # not asked for (docs/census.md, "Measured bytes")
                with peak:
                    torch.autograd.backward(hidden_out.float().sum(), inputs=_stack_inputs(extra, built))
                for index, probe in watcher.probes.items():
                    probe.backward_peak = peak.peaks.get(index, 0)
                    # per token of the sequence (one sequence), as the records price it: a layer called
                    # with several streams of hidden states (gemma3n's, hyper-connections) holds their widths;
                    # the compute dtype is the build's, not the embedding's (ergo's is kept in fp32, and so
                    # is its stream: its gradients are fp32, priced as such)
                    probe.working_set = working_set(peak.at_peak.get(index), seq_length, BUILD_DTYPE)
    except (DynamicOutputShapeException, DataDependentOutputException) as err:
        raise ModelCodeError(
            "unsupported_layer",
            f"{model_code(err)}: {err.func} needs the tensors' values (a data-dependent shape or scalar), which fake tensors do not have",
        ) from err
    except (SpecError, MemoryError):
        raise
    except Exception as err:
        where = failing_model_code(err)
        if where is None:  # the census's own code failed: not the model's limit
            raise
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ModelCodeError(
            "unsupported_layer",
            f"{where}: {type(err).__name__}: {first_line[:200]} (the model's own code fails where the census runs it: its decoder {way.words()}, in bf16, on fake tensors)",
        ) from err
    finally:
        gc.unfreeze()
        setattr(holder, stack_name, built.layers)
    return watcher


def _stack_inputs(given: dict[str, Any], built: Built) -> list[torch.Tensor]:
    """What the decoder was given that the backward runs back to: the input embeddings (and
    encoder states), or, from token ids, the embedding's weight."""
    return [t for t in given.values() if isinstance(t, torch.Tensor) and t.requires_grad] or [built.embedding.weight]


