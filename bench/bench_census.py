"""Census speed: every shipped config in one process, imports excluded, side by side with the naive way.

The census builds the language model on the meta device without weight initialisation and
converts only one layer of each distinct shape to fake tensors. The naive way builds the whole
model under FakeTensorMode (weights initialised on fake tensors), then runs the same layers the
same way. Both are warmed up first (one untimed pass over every config pays the imports of
torch, transformers and each modeling module), then timed over `ROUNDS` passes; the per-config
time is the best of the rounds. Target: census median ≤ 0.3 s per config.

Within it, building the model and one probe per kind (no FLOP counting, no ends, no spec):
the census's measurement core. Target: median ≤ 0.1 s per config.

Then the census with its measurements across settings (`across=True`, what the night runs:
a second length, cp and tp ranks, switch sets through selective checkpointing), one round.
Target: median ≤ 1.0 s per config.
"""

from __future__ import annotations

import logging
import os
import statistics
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROUNDS = 3
TARGET_MEDIAN = 0.3
TARGET_ACROSS = 1.0
TARGET_CORE = 0.1


def _configs():
    import json
    from pathlib import Path

    snapshot = Path(__file__).resolve().parent.parent / "flows" / "snapshot"
    return [(p.parent.name.replace("__", "/", 1), json.loads(p.read_text())) for p in sorted(snapshot.glob("*/config.json"))]


def naive(config: dict, name: str):
    """The whole model built under FakeTensorMode, then one layer of each distinct shape run."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from speccat.census.kernels.attention import ATTENTION_IMPL
    from speccat.census.build.model import BUILD_DTYPE, locate, model_class_for
    from speccat.census.measure.probe import probe_layers
    from speccat.census.intake.resolve import resolve_config
    from speccat.census.structure.shapes import classify

    top, text, _ = resolve_config(config)
    auto, cfg = model_class_for(top, text)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        model = auto.from_config(cfg, dtype=BUILD_DTYPE, attn_implementation=ATTENTION_IMPL, trust_remote_code=False)
    built = locate(model)
    stack = classify(built.layers)
    firsts = list(dict.fromkeys(shape.first for _, shape in stack))
    return probe_layers(built, firsts, 4096, fake_mode=mode)


def core(config: dict, name: str):
    """Building the model on meta and one probe per distinct shape: the census without FLOP
    counting, the model's ends, describing the layers or writing the spec."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from speccat.census.intake import remote
    from speccat.census.build.model import build
    from speccat.census.measure.probe import probe_layers
    from speccat.census.intake.resolve import resolve_config
    from speccat.census.structure.shapes import classify

    top, text, _ = resolve_config(remote.resolve(config, CONFIG_MAPPING))
    built = build(top, text)
    firsts = list(dict.fromkeys(shape.first for _, shape in classify(built.layers)))
    return probe_layers(built, firsts, 4096)


def _time(fn, configs, rounds: int = ROUNDS) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, config in configs:
            started = time.perf_counter()
            fn(config, name)
            elapsed = time.perf_counter() - started
            best[name] = min(elapsed, best.get(name, elapsed))
    return best


def main() -> None:
    logging.getLogger("speccat.census").setLevel(logging.ERROR)  # profile mismatches are not the point here
    from speccat.census import run_census

    def census(config, name):
        return run_census(config, name=name)

    from speccat.census.spec import SpecError

    configs, refused = [], []
    for name, config in _configs():  # warm-up: imports and first-use costs, untimed
        try:
            census(config, name)
        except SpecError as err:  # refused by design or a known limit (tests/census/test_census_hub_more.py)
            refused.append(f"{name} ({err.reason})")
            continue
        configs.append((name, config))
    naive_configs = []
    for name, config in configs:
        try:
            naive(config, name)
            naive_configs.append((name, config))
        except Exception:  # the naive way builds with speccat's attention only (falcon and gpt-neo refuse it)
            pass
    ours = _time(census, configs)
    theirs = _time(naive, naive_configs)

    def stats(times):
        return statistics.median(times.values()), max(times.values())

    (median, worst), (naive_median, naive_worst) = stats(ours), stats(theirs)
    print(f"   {len(configs)} shipped configs, best of {ROUNDS} rounds each, imports excluded")
    print(f"   census: median {median:.3f} s  max {worst:.3f} s per config")
    print(f"   naive (whole model under FakeTensorMode): median {naive_median:.3f} s  max {naive_worst:.3f} s per config")
    print(f"   ratio naive/census: median {naive_median / median:.1f}x  max {naive_worst / worst:.1f}x")
    slowest = sorted(ours, key=ours.get, reverse=True)[:5]
    print("   slowest census: " + ", ".join(f"{n} {ours[n]:.3f} s" + (f" (naive {theirs[n]:.3f} s)" if n in theirs else "") for n in slowest))
    print(f"   refused, not timed: {', '.join(refused) or 'none'}")
    print(f"   target median <= {TARGET_MEDIAN} s: {'met' if median <= TARGET_MEDIAN else 'MISSED'}")
    built = _time(core, configs)
    core_median = statistics.median(built.values())
    print(f"   building and one probe per kind: median {core_median:.3f} s  max {max(built.values()):.3f} s per config")
    slowest = sorted(built, key=built.get, reverse=True)[:5]
    print("   slowest: " + ", ".join(f"{n} {built[n]:.3f} s" for n in slowest))
    print(f"   target median <= {TARGET_CORE} s: {'met' if core_median <= TARGET_CORE else 'MISSED'}")
    across = _time(lambda config, name: run_census(config, name=name, across=True), configs, rounds=1)
    across_median = statistics.median(across.values())
    print(f"   census with its measurements across settings: median {across_median:.3f} s  max {max(across.values()):.3f} s per config (one round)")
    slowest = sorted(across, key=across.get, reverse=True)[:5]
    print("   slowest: " + ", ".join(f"{n} {across[n]:.3f} s" for n in slowest))
    print(f"   target median <= {TARGET_ACROSS} s: {'met' if across_median <= TARGET_ACROSS else 'MISSED'}")


if __name__ == "__main__":
    main()
