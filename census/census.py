"""`run_census`: the census of one model, config → ModelSpec (docs/census.md), every refusal a
SpecError with a reason code.

It strings the steps together: resolve the config (census/intake/resolve.py), build on meta
(census/build/model.py), classify the layers into shapes and kinds (census/structure/shapes.py), probe one layer
of each shape (census/measure/probe.py) and describe what was built and probed (census/describe/layer_view.py).

Safe to call many times in one process: the model is built per call, and everything a probe
changes (hooks, dispatch modes, the swapped delta rule, config lists) is undone before it
returns, whatever happens. Expected op counts from the family profile are compared with the
counted ones; a mismatch is logged as a warning and the counted values are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from speccat.census.across import encoder_points, encoder_tokens, measure_across
from speccat.census.build.model import build
from speccat.census.intake.checks import check_stack_length
from speccat.census.intake.config import language_config
from speccat.census.describe.feed_forward_facts import EXPERTS_IMPL
from speccat.census.describe.layer_view import LayerView, parameter_holders
from speccat.census.describe.model_facts import attention_dims, model_facts
from speccat.census.describe.probe_checks import check_probes, check_tokens
from speccat.catalogue.shared import default_seq_length
from speccat.census.structure.family import Family, family_for
from speccat.census.measure.ends import probe_ends
from speccat.census.structure.kinds import kind_names
from speccat.census.intake import remote
from speccat.census.structure.predicates import is_norm
from speccat.census.measure.layer_probe import LayerProbe
from speccat.census.measure.outside_params import outside_params
from speccat.census.measure.probe import encoder_input, probe_layers
from speccat.census.intake.resolve import resolve_config
from speccat.census.structure.shapes import Shape, classify, layer_groups, merge_alike, split_by_layer_config, split_each_layer, uses_experts_interface
from speccat.census.spec import ModelSpec, SpecError

log = logging.getLogger(__name__)

# Config fields that bound the sequence a model can run (learned positions, ALiBi tables).
POSITION_LIMITS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length")


def _same_measurement(a, b) -> bool:
    """Two probed layers of one shape kept the same bytes, op by op, and called their attention
    kernels with the same sliding windows. (Not the share of them that is the layer's own input:
    the first layer's input is the embedding's output, and it is told apart from the others'
    there, whatever the layers do.) The census's kernel takes the window as an argument and keeps
    alike either way, but transformers hands sdpa an explicit mask for a window no longer than
    the sequence, which a GPU's kernel keeps (docs/census.md, "Which sdpa kernel runs on CUDA")."""
    return a.saved_bytes == b.saved_bytes and _windows(a) == _windows(b)


def _windows(probe) -> list[int]:
    return sorted(k.window for k in probe.kernels if k.kind == "attention")


def _kinds(family: Family, shapes: list[Shape], config) -> tuple[dict[int, str], bool]:
    """Each distinct shape's kind (keyed by its first layer), and whether the profile named them."""
    names, by_profile = kind_names(family, shapes, config)
    return {shape.first: name for shape, name in zip(shapes, names)}, by_profile


def _runnable_length(built, seq_length: int) -> int:
    """The census's length, or the model's own maximum when that is shorter (learned absolute
    positions: gpt-neo 2048, openai-gpt 512); measured bytes are per token either way."""
    limits = [getattr(built.config, name, None) for name in POSITION_LIMITS]
    limits = [v for v in limits if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return min([seq_length, *limits])


def _settle_eager(views: list[LayerView]) -> None:
    """A layer whose code calls no attention interface is full attention when its own attention
    ran through speccat's kernel (census/kernels/routing.py), a feed-forward-only block (mixer `none`) when
    all it holds beside norms is an MLP or routed experts; otherwise it runs a mixer the census
    does not know."""
    for view in views:
        if view.shape.mixer != "eager":
            continue
        if view.attention_kernels():
            view.shape.mixer = "full"
            continue
        if view.linear_eager_kernels():  # a linear attention run in torch (census/kernels/routing.py), its decay gated by the tokens or not
            view.shape.mixer = "linear_eager_gated" if any(k.gated for k in view.linear_eager_kernels()) else "linear_eager"
            continue
        if view.feed_forward_only():
            view.shape.mixer = "none"  # a block of only an MLP or MoE (nemotron_h's)
            continue
        mixers = sorted({type(m).__name__ for _, m in view.layer.named_children() if not is_norm(m) and any(True for _ in m.parameters())})
        raise SpecError(
            "unsupported_layer",
            f"layer {view.index} ({type(view.layer).__name__}: {', '.join(mixers)}): ran no attention (interface, SDPA or "
            "eager score·value matmuls) and no mixer the census knows",
        )


def _settle_cross(built, shapes: list[Shape], probes: dict[int, LayerProbe], seq_length: int) -> dict[int, LayerProbe]:
    """The layers the decoder skipped on a plain causal input, probed again with encoder states:
    {layer index: its probe with encoder states} for each that is a cross-attention layer.

    A layer is a cross-attention layer when the decoder calls it only once it is given encoder
    states, and then every kernel it runs is attention whose queries are the decoder's tokens and
    whose keys and values have the encoder's (they come from the encoder states, not from the
    layer's hidden stream). Its shape's mixer becomes `cross`. A skipped layer that is not one is
    left to check_probes, which refuses it.
    """
    skipped = [shape for shape in shapes if not probes[shape.first].ran]
    if not skipped or encoder_input(built.decoder) is None:
        return {}
    skipped = [shape for shape in skipped if encoder_input(built.layers[shape.first]) is not None]
    if not skipped:
        return {}
    tokens = encoder_tokens(seq_length)[0]
    given = probe_layers(built, [shape.first for shape in skipped], seq_length, encoder_tokens=tokens)
    cross = {}
    for shape in skipped:
        probe = given[shape.first]
        kernels = probe.kernels
        if probe.ran and kernels and all(k.kind == "attention" and k["q"][2] == seq_length and k["k"][2] == k["v"][2] == tokens for k in kernels):
            shape.mixer = "cross"
            cross[shape.first] = probe
    return cross


def _compare_with_profile(family: Family, kind: str, counted: Mapping[str, int], name: str) -> None:
    expected = family.kinds[kind].ops
    differ = {op: (expected[op], counted[op]) for op in counted if expected[op] != counted[op]}
    if differ:
        detail = ", ".join(f"{op} profile {e} counted {c}" for op, (e, c) in differ.items())
        log.warning("%s: kind %r of family %r: counts differ from the profile (%s); keeping the counted values", name, kind, family.name, detail)


def _census(config: Mapping, name: str, seq_length: int, across: bool) -> ModelSpec:
    resolved = remote.resolve(config, CONFIG_MAPPING)
    top, text, nested = resolve_config(resolved)
    arch = config["model_type"]
    family = family_for(arch)
    built = build(top, text)
    check_stack_length(language_config(resolved), text, len(built.layers), nested=nested)
    if uses_experts_interface(built.layers) and built.decoder.config._experts_implementation != EXPERTS_IMPL:
        built.model.set_experts_implementation(EXPERTS_IMPL)
    seq_length = _runnable_length(built, seq_length)
    # layers built alike that the config's per-layer lists may tell to run differently are
    # probed apart, and kept apart only where what they keep differs
    stack = split_by_layer_config(classify(built.layers), built.config)
    holders = parameter_holders(built.layers)  # read on meta: the probe converts the layers it runs
    candidates = list(dict.fromkeys(shape for _, shape in stack))
    probes = probe_layers(built, [shape.first for shape in candidates], seq_length, flops=True)
    if any(probe.reads_depth for probe in probes.values()):
        # what a layer keeps depends on its place (it attends over states stored down the depth):
        # every layer is probed at its place, and kept apart only where what it keeps differs
        stack = split_each_layer(stack)
        probes = probe_layers(built, [index for index, _ in stack], seq_length, flops=True)
    check_tokens(probes, seq_length)
    stack = merge_alike(stack, lambda a, b: _same_measurement(probes[a.first], probes[b.first]))
    shapes = list(dict.fromkeys(shape for _, shape in stack))
    # the layers' width, read from the hidden states they were called with: it differs from the
    # embedding's where the model projects its embeddings (electra, rembert)
    hidden = next((p.hidden_width for p in probes.values() if p.ran), 0) or int(built.embedding.weight.shape[1])
    cross = _settle_cross(built, shapes, probes, seq_length)
    views = [LayerView(shape.first, built.layers[shape.first], cross.get(shape.first, probes[shape.first]), shape, hidden) for shape in shapes]
    _settle_eager(views)
    check_probes(views)  # what ran can refuse too (cross-attention, layers that skip their attention)
    for view in views:  # census/measure/readers.py: a layer reading the keys and values an earlier layer stored
        view.shape.reads_kv = any(k.kv_borrowed for k in view.attention_kernels())
    kind_of, by_profile = _kinds(family, shapes, built.config)

    spec = {"name": name, "arch": arch, "built_as": type(built.model).__name__}
    spec.update(model_facts(built, views, stack))
    spec["layers"] = layer_groups(stack, kind_of)
    _, differing = attention_dims(views)
    if differing:  # kinds whose attention differs in shape from the model-wide dims state their own
        spec["attention_dims"] = {kind_of[index]: dims for index, dims in differing.items()}
    spec["ops"], spec["flavours"], spec["measured"], spec["variants"] = {}, {}, {}, {}
    kind_params = {}
    for view in views:
        kind = kind_of[view.index]
        spec["ops"][kind] = view.ops()
        if by_profile:
            _compare_with_profile(family, kind, spec["ops"][kind], name)
        spec["flavours"][kind] = {"attention": view.shape.mixer, "ffn": view.shape.ffn}
        kind_params[kind] = view.params(holders[view.index])
        spec["variants"][kind] = view.variants(spec.get("num_experts_per_tok"))
        # a cross-attention kind at the census's setting: no encoder tokens (text-only training),
        # where the decoder skips the layer; what the plain probe saw it keep (nothing)
        plain = view if view.index not in cross else LayerView(view.index, view.layer, probes[view.index], view.shape, hidden)
        measured = {
            "seq_length": seq_length,
            "attention_impl": view.mixer_op(),
            "bytes_per_token": plain.bytes_per_token(seq_length),
            "forward_flops": plain.probe.forward_flops,
            "backward_peak": plain.probe.backward_peak,
            "working_set": plain.probe.working_set,
        }
        if view.shape.ffn == "moe":
            measured["experts_impl"] = view.experts_impl()
        spec["measured"][kind] = measured
    spec["params"] = {**built.params, **outside_params(built, seq_length), "kinds": kind_params}
    if across:
        spec["measured_at"] = measure_across(top, text, built, shapes, kind_of, seq_length, probes, hidden)
    if cross:  # a cross-attention kind is measured with encoder states too, whether or not across
        cross_shapes = [shape for shape in shapes if shape.first in cross]
        spec["measured_at"] = spec.get("measured_at", []) + encoder_points(built, cross_shapes, kind_of, seq_length, cross, hidden, across)
    ends = probe_ends(built, seq_length, hidden)
    if ends is not None:
        spec["ends"] = {"seq_length": seq_length, **ends}
    return ModelSpec(spec)


def run_census(config: Mapping, *, name: str, seq_length: int | None = None, across: bool = False) -> ModelSpec:
    """Census one config into a ModelSpec, measured at `seq_length` tokens (default:
    catalogue/shared.yaml's, the settings grid's default sequence length, so the measurement has
    a setting to be priced at).

    With `across`, every kind is also measured at the points of census/across.yaml (the
    spec's `measured_at`, census/across.py): four more probes, so the night asks for it
    and a quick census does not.

    Raises SpecError with a reason code for every refusal; any other exception is wrapped as
    `census_failed` naming its type.
    """
    if not isinstance(name, str) or not name:
        raise SpecError("bad_value", f"name: must be a non-empty string, got {name!r}")
    if seq_length is None:
        seq_length = default_seq_length()
    if not isinstance(seq_length, int) or isinstance(seq_length, bool) or seq_length < 1:
        raise SpecError("bad_value", f"seq_length: must be a positive integer, got {seq_length!r}")
    default_dtype = torch.get_default_dtype()
    try:
        return _census(config, name, seq_length, across)
    except SpecError:
        raise
    except Exception as err:
        raise SpecError("census_failed", f"{name}: {type(err).__name__}: {err}") from err
    finally:
        torch.set_default_dtype(default_dtype)
