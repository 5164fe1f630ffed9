"""Evaluations per second of one slot through the compiled expressions.

The slot is the records' dense `ffn` (two elements, each with conditionals over the stack and
the variant facts) for one Llama-3.1-8B layer at the default setting, evaluated with all its
ops kept: that is what the direct evaluator does per mask. Side by side, the same arithmetic
written as a plain Python function, the floor any expression evaluator in Python can reach;
their ratio is the cost of the closed language (validation is paid once, at parse time).
"""

from __future__ import annotations

import time

SECONDS = 1.0


def rate(fn) -> float:
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < SECONDS:
        for _ in range(1000):
            fn()
        count += 1000
    return count / elapsed


def main() -> None:
    from speccat.catalogue.records.names import layer_names
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings
    from speccat.catalogue.vocabulary import VARIANTS

    records, grid = load_records(), load_settings()
    ops = {"attMM": 4, "attBMM": 2, "ffMM": 3, "softmax": 1, "dropout": 0, "normOp": 2, "gather": 4, "headCast": 1, "ffAct": 1, "linrec": 0}
    variants = {name: False for name in VARIANTS} | {"norm_upcast": True, "index_topk": 0, "act_saved": 1}
    spec = {
        "name": "llama", "arch": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "layers": [{"kind": "decoder", "count": 32}], "ops": {"decoder": ops},
        "flavours": {"decoder": {"attention": "full", "ffn": "dense"}}, "variants": {"decoder": variants},
    }  # fmt: skip
    names = layer_names(spec, "decoder", grid.setting(), records, grid.dtype_bytes)
    slot = next(s for s in records.slots if s.name == "ffn")
    kept = records.kept(0)
    value = slot.value(names, kept)

    n = {k: names[k] for k in ("h", "hff", "bc", "rep", "mg", "gated", "ff_fused_gate_up", "act_saved", "n_ffAct", "micro_factor", "s", "b", "t", "cp")}

    def plain():  # the same arithmetic as records.yaml's ffn slot, written out
        mg, fused = n["mg"], n["ff_fused_gate_up"]
        ff_mm = n["bc"] * n["h"] * n["rep"] + n["bc"] * n["hff"] * (mg + (1 - mg) * (2 * n["gated"] + 1 - fused))
        ff_act = n["n_ffAct"] * n["bc"] * n["hff"] * (mg * (1 + n["gated"]) + (1 - mg) * (n["act_saved"] + fused))
        total = 0.0 + ff_mm + ff_act
        return n["micro_factor"] * n["s"] * n["b"] * total / (n["t"] * n["cp"])

    assert plain() == value, (plain(), value)
    compiled = rate(lambda: slot.value(names, kept))
    reference = rate(plain)
    print(f"   slot `ffn` (3 expressions: 2 elements + formula), value {value:,.0f} bytes")
    print(f"   compiled expressions: {compiled:12,.0f} slot evaluations/s ({3 * compiled:,.0f} expressions/s)")
    print(f"   plain Python function: {reference:11,.0f} slot evaluations/s   (ratio {reference / compiled:.1f}x)")


if __name__ == "__main__":
    main()
