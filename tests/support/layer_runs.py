"""Real CPU runs of one layer of a tiny model, for the tests that compare the census's booking
with what a layer really keeps (the mixers' tests: mamba, mamba2, the scan apart, falcon-mamba,
short convolutions, rwkv, linear attention run in torch), and the records' price of a spec's kinds
beside what the census measured."""

from __future__ import annotations

import inspect

import torch
from support.storage_tracker import saved_tensors


def tiny_model(config: dict, dtype: torch.dtype):
    """The causal LM of `config` (a config.json's fields; `torch_dtype` is ignored), built with real
    weights in `dtype` (seed 0), in training mode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    built = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "torch_dtype"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(built, dtype=dtype)
    model.train()
    return model


def saves_and_grads(model, layer, x: torch.Tensor, square: bool = True, **inputs) -> tuple[dict[int, torch.Tensor], dict[str, torch.Tensor]]:
    """One forward and backward of `layer` on `x` (and its other `inputs`, passed by name): (the
    storages it saved for backward, by storage, the model's parameters and buffers, x, the other
    inputs and the output left out; the gradients of the layer's parameters, of x and of each
    other input that requires one). The loss is the output's squared sum, or its sum.

    A storage counts where a save of it is still held once the forward returned: a branch the
    output does not reach (doge's dynamic mask, which speccat's flash kernel does not take) is
    freed with its saves then, in a run without hooks as in the census (storage_tracker.saved_tensors)."""
    with saved_tensors() as held:
        out = layer(x, **inputs)
    out = out[0] if isinstance(out, tuple) else out
    saved = {key: tensor for key, (tensor, holders) in held.items() if any(holder() is not None for holder in holders)}
    (out.float().square() if square else out.float()).sum().backward()
    given = [t for t in inputs.values() if isinstance(t, torch.Tensor)]
    left_out = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers(), x, *given, out)}
    grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    grads["x"] = x.grad.clone()
    grads.update({name: t.grad.clone() for name, t in inputs.items() if isinstance(t, torch.Tensor) and t.grad is not None})
    return {k: t for k, t in saved.items() if k not in left_out}, grads


def rotary_layer_bytes(config: dict, seq: int) -> float:
    """Bytes per token that layer 0 of the tiny model of `config` (a rotary decoder) saves in one
    real bf16 forward and backward on CPU, its attention through speccat's kernel: every storage
    but the parameters, the layer's input and output and the rotary tables (every layer's input)."""
    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    model = tiny_model({**config, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    torch.manual_seed(1)
    x = torch.randn(1, seq, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    # a rotary of several layer types (lfm3's) is asked for layer 0's
    per_type = "layer_type" in inspect.signature(model.model.rotary_emb.forward).parameters
    rotary = model.model.rotary_emb(x, torch.arange(seq).unsqueeze(0), **({"layer_type": config["layer_types"][0]} if per_type else {}))
    kept, _ = saves_and_grads(model, model.model.layers[0], x, position_embeddings=rotary)
    tables = {t.untyped_storage()._cdata for t in rotary}
    return sum(t.untyped_storage().nbytes() for k, t in kept.items() if k not in tables) / seq


def layer_saves(monkeypatch, modeling, kernels: dict, config: dict, index: int, seq: int, **inputs) -> dict[int, torch.Tensor]:
    """One real bf16 forward and backward of the tiny model's layer `index` on CPU, with the
    modeling module's kernel functions swapped for speccat's stand-ins (`kernels`: name -> op) and
    its attention through speccat's kernel: the storages it saved (saves_and_grads)."""
    from speccat.census.kernels.attention import ATTENTION_IMPL, register

    register()
    for name, op in kernels.items():
        monkeypatch.setattr(modeling, name, op)
    model = tiny_model({**config, "attn_implementation": ATTENTION_IMPL}, torch.bfloat16)
    torch.manual_seed(1)
    x = torch.randn(1, seq, config["hidden_size"], dtype=torch.bfloat16, requires_grad=True)
    kept, _ = saves_and_grads(model, model.model.layers[index], x, **inputs)
    monkeypatch.undo()
    return kept


def signature(tensors) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """(shape, dtype, storage bytes) of each tensor, sorted: what a layer keeps, comparable."""
    return sorted(((tuple(t.shape), t.dtype, t.untyped_storage().nbytes()) for t in tensors), key=str)


def assert_same_grads(ours: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    """The same gradients, for the input and every parameter, within fp32 rounding of a different
    order of operations."""
    assert ours.keys() == reference.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], reference[name], rtol=2e-4, atol=2e-5, msg=name)


def priced_vs_measured(spec, seq: int) -> dict[str, tuple[float, float]]:
    """kind -> (the records' bytes per token at the grid's setting of sequence length `seq`, what
    the census measured it keeping per token)."""
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.pricing import price_layers
    from speccat.catalogue.records.settings import load_settings

    records, grid = load_records(), load_settings()
    one = grid.with_settings([grid.setting({"seq_length": seq})])
    prices = price_layers(spec, records, one)
    return {
        kind: (float(prices.total[i, 0, 0]) / seq, sum(spec["measured"][kind]["bytes_per_token"].values())) for i, kind in enumerate(prices.kinds)
    }


def saved_by_graph(root: torch.Tensor) -> dict[int, torch.Tensor]:
    """Every tensor the autograd graph behind `root` holds for backward, by storage."""
    found, seen, stack = {}, set(), [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        values = []
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    values.append(getattr(node, name))
                except RuntimeError:  # freed or not a tensor slot
                    continue
        if hasattr(node, "saved_tensors"):  # a Python-level autograd function (speccat's kernels)
            values.extend(node.saved_tensors)
        for value in values:
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor) and t.dim() > 0:  # 0-dim: wrapped scalars, no activation
                    found[t.untyped_storage()._cdata] = t
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


def saved_by_layer(model: torch.nn.Module, layer: torch.nn.Module, x: torch.Tensor) -> dict[int, torch.Tensor]:
    """What the real graph of `layer` called on `x` (no mask) holds for backward, by storage:
    not the model's parameters and buffers, nor the layer's output."""
    fixed = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    out = layer(x, attention_mask=None)
    out = out[0] if isinstance(out, tuple) else out
    return {key: t for key, t in saved_by_graph(out).items() if key not in fixed | {out.untyped_storage()._cdata}}


def saves_by_layer(model: torch.nn.Module, seq: int) -> tuple[dict[int, tuple[int, torch.Tensor]], dict[int, list[torch.Tensor]], set[int]]:
    """A real forward and backward of `model`'s whole decoder on `seq` token ids (seed 1): (each
    storage first saved for backward while one of its layers ran, as (that layer's index, a tensor
    of it); each layer's inputs beside its hidden states, the members of a tuple or list among
    them too, and its outputs, all its calls', held so that no later storage takes their
    identity; the model's parameters' and buffers' storages). What a test leaves out of a
    layer's saves, as the census does, it takes from the last two."""
    decoder = model.model
    current: list[int | None] = [None]
    given: dict[int, list[torch.Tensor]] = {index: [] for index in range(len(decoder.layers))}
    saved: dict[int, tuple[int, torch.Tensor]] = {}

    def tensors(values) -> list[torch.Tensor]:
        flat = [m for v in values for m in (v if isinstance(v, (tuple, list)) else (v,))]
        return [t for t in flat if isinstance(t, torch.Tensor)]

    def pre(index):
        def hook(module, args, kwargs):
            current[0] = index
            given[index].extend(tensors((*args[1:], *kwargs.values())))

        return hook

    def post(index):
        def hook(module, args, kwargs, output):
            current[0] = None
            given[index].extend(tensors((output,)))

        return hook

    for index, layer in enumerate(decoder.layers):
        layer.register_forward_pre_hook(pre(index), with_kwargs=True)
        layer.register_forward_hook(post(index), with_kwargs=True)

    def pack(t):
        if current[0] is not None:
            saved.setdefault(t.untyped_storage()._cdata, (current[0], t))
        return t

    ids = torch.randint(0, 128, (1, seq), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = decoder(input_ids=ids, use_cache=False).last_hidden_state
    out.float().square().sum().backward()
    return saved, given, {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
