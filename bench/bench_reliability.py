"""Reliability measurements: a census child's memory against its budget, and a large fuzz of
the expression language.

1. Memory. Each shipped config is censused and priced in a child process, as the flow does it
   (flows/isolate.py running flows/analysis.py), and the child reports how much its address
   space (VmPeak) and its resident memory (VmHWM) grew past what it was forked with. Twice:
   unbounded (what a child maps when nothing stops it: pyarrow's allocator, mimalloc, reserves
   a 1 GiB arena it barely touches) and under a probe budget of PROBE_MIB (what it needs when
   it cannot over-reserve). The same for the largest config the census bounds admit (a llama
   of 1024 layers, census/intake/limits.yaml). Printed: the largest growth of each kind, and the
   default budget (census/intake/limits.yaml census_memory_mib) as a multiple of it. A config the census
   refuses is reported in one line with its reason code and left out; a child that fails
   otherwise (timeout, budget, crash) is reported as FAILED and left out.
2. Fuzz. The escape fuzz of tests/pricing/test_security_expr.py at FUZZ_EXAMPLES generated
   expressions and as many random strings (the suite runs fewer): escapes found (must be 0)
   and the rate.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE_MIB = 256
FUZZ_EXAMPLES = 20_000


def _status() -> dict[str, int]:
    """This process's VmPeak and VmHWM in KiB (Linux)."""
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmPeak", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def measured_analyse(config: dict, name: str) -> tuple[float, float]:
    """Run in a census child: the analysis, then (address space, resident memory) grown, MiB."""
    from speccat.flows.analysis import analyse

    before = _status()
    analyse(config, name, 4096)
    after = _status()
    return (after["VmPeak"] - before["VmPeak"]) / 1024, (after["VmHWM"] - before["VmHWM"]) / 1024


def memory() -> None:
    from speccat.census import load_config_file
    from speccat.census.intake.limits import LIMITS
    from speccat.flows import isolate

    isolate.start()
    configs = {p.parent.name.replace("__", "/", 1): load_config_file(p) for p in sorted((ROOT / "flows" / "snapshot").glob("*/config.json"))}
    largest = dict(configs["meta-llama/Llama-3.2-1B-Instruct"], num_hidden_layers=LIMITS.sizes["num_hidden_layers"][1])
    target = f"{__name__}:measured_analyse"
    print(f"   growth of a census child past its fork (MiB), {len(configs)} shipped configs:")
    worst = {}
    refused: set[str] = set()
    for label, budget in (("unbounded", None), (f"under a {PROBE_MIB} MiB budget", PROBE_MIB)):
        grown = {}
        for name, config in configs.items():
            if name in refused:
                continue
            outcome = isolate.run(target, (config, name), time_limit=600, memory_limit=budget)
            if outcome.error == "spec_error":  # refused by the census (by design or a known limit): nothing to measure
                refused.add(name)
                print(f"   refused, not measured: {name}: {outcome.reason}")
                continue
            if not outcome.ok:  # a timeout, the budget or a crash: a finding to show, not a reason to stop
                print(f"   FAILED {label}: {name}: {outcome.error}: {outcome.message[:300]}")
                continue
            grown[name] = outcome.value
        vm_name = max(grown, key=lambda n: grown[n][0])
        rss_name = max(grown, key=lambda n: grown[n][1])
        big = isolate.run(target, (largest, "llama-1024-layers"), time_limit=600, memory_limit=budget)
        if not big.ok:
            print(f"   FAILED {label}: 1024 layers: {big.error}: {big.message[:300]}")
        big_vm, big_rss = big.value if big.ok else (0.0, 0.0)
        worst[label] = max(grown[vm_name][0], big_vm)
        print(
            f"   {label:28} address space: max {grown[vm_name][0]:7.1f} ({vm_name}); "
            f"resident: max {grown[rss_name][1]:6.1f} ({rss_name}); 1024-layer llama "
            + (f"{big_vm:7.1f} / {big_rss:6.1f}" if big.ok else "failed")
        )
    budget = LIMITS.census_memory_mib
    for label, need in worst.items():
        print(f"   default budget {budget} MiB = {budget / need:5.1f}x the largest address-space growth {label}")


def fuzz() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import test_security_expr as sec

    started = time.perf_counter()
    escapes = sec.fuzz(FUZZ_EXAMPLES)
    seconds = time.perf_counter() - started
    print(f"   {2 * FUZZ_EXAMPLES:,} fuzzed expressions and strings in {seconds:.1f} s ({2 * FUZZ_EXAMPLES / seconds:,.0f}/s): {len(escapes)} escapes")
    for source, what in escapes[:10]:
        print(f"     ESCAPE {source!r}: {what}")


def main() -> None:
    memory()
    fuzz()


if __name__ == "__main__":
    main()
