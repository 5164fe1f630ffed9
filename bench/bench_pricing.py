"""Pricing every switch set × kind × setting of every shipped config: fast path against direct.

The shipped configs are censused first (not timed). Then, config by config, the same specs
are priced over the whole settings grid by the fast path (the best of REPEATS runs) and by
the direct evaluator (once), side by side in this one process; the fast result is checked
equal to the direct one bit for bit. Printed: prices per second of each, and their ratio.
Targets: the fast path at least 100× the direct one, and at least 1 million prices per second.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

RATIO_TARGET = 100.0
RATE_TARGET = 1_000_000
REPEATS = 5


def censused_specs():
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from speccat.census import load_config_file, run_census
    from speccat.census.spec import SpecError

    snapshot = Path(__file__).resolve().parent.parent / "flows" / "snapshot"
    specs = []
    for path in sorted(snapshot.glob("*/config.json")):
        try:
            spec = run_census(load_config_file(path), name=path.parent.name)
        except SpecError as err:  # refused by design or a known limit: nothing to price
            print(f"   refused, not priced: {path.parent.name.replace('__', '/', 1)}: {err.reason}")
            continue
        specs.append(spec)
    return specs


def timed(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    from speccat.catalogue.errors import ReasonError
    from speccat.catalogue.records.pricing import price_layers
    from speccat.catalogue.records.oprecords import load_records
    from speccat.catalogue.records.settings import load_settings

    records, grid = load_records(), load_settings()
    started = time.perf_counter()
    specs = censused_specs()
    print(f"   censused {len(specs)} shipped configs in {time.perf_counter() - started:.1f} s (not timed below)")
    price_layers(specs[0], records, grid)  # warm caches (slot plans, imports)
    prices = fast_s = direct_s = 0.0
    for spec in specs:
        try:
            price_layers(spec, records, grid, "fast")
        except ReasonError as err:  # the records cannot price some op of it: the night stores it unpriced
            print(f"   refused by pricing, not timed: {spec['name']}: {err.reason}")
            continue
        t_fast, fast = timed(lambda: price_layers(spec, records, grid, "fast"), REPEATS)
        t_direct, direct = timed(lambda: price_layers(spec, records, grid, "direct"), 1)
        if not fast.same_bits(direct):
            sys.exit(f"fast and direct prices differ for {spec['name']}")
        prices += fast.total.size
        fast_s += t_fast
        direct_s += t_direct
    fast_rate, direct_rate = prices / fast_s, prices / direct_s
    ratio = fast_rate / direct_rate
    print(f"   {prices:,.0f} (kind, setting, mask) prices: {len(specs)} configs × kinds × {len(grid.settings)} settings × {records.n_masks} masks")
    print(f"   fast path: {fast_rate:12,.0f} prices/s  ({fast_s:.3f} s)   target >= {RATE_TARGET:,}")
    print(f"   direct:    {direct_rate:12,.0f} prices/s  ({direct_s:.3f} s)")
    print(f"   ratio fast/direct: {ratio:.0f}x   target >= {RATIO_TARGET:.0f}x   (fast == direct bit for bit: yes)")
    print(f"   {'MEETS' if ratio >= RATIO_TARGET and fast_rate >= RATE_TARGET else 'MISSES'} the targets")


if __name__ == "__main__":
    main()
