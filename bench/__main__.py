"""`python -m bench [NAME ...] [--OPTION [VALUE] ...]`: run every bench/bench_*.py (or those named) in turn.

Benches in OPT_IN run only when named (bench_drift builds a virtual environment, bench_gpu runs on a
GPU, bench_same takes minutes and needs --save DIR or --against DIR). The arguments from the first
one that starts with `-` on are passed to the named benches' `main(argv)` (`python -m bench drift
--against .venv/bin/python`). A bench whose main returns a non-zero status makes the run exit with
it (the last such status), after every bench ran.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench

OPT_IN = frozenset({"bench_drift", "bench_gpu", "bench_same"})


def main(argv: list[str]) -> int:
    first_option = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names_asked, options = argv[:first_option], argv[first_option:]
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    wanted = [n for n in names if any(a in n for a in names_asked)] if names_asked else [n for n in names if n not in OPT_IN]
    if not wanted:
        print(f"no benchmark matches {names_asked}; have {names}", file=sys.stderr)
        return 2
    status = 0
    for name in wanted:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        module = importlib.import_module(f"bench.{name}")
        code = module.main(options) if options else module.main()
        status = code if isinstance(code, int) and code != 0 else status
        print(f"   ({time.perf_counter() - started:.1f} s)\n", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
