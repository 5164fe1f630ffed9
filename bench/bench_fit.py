"""`speccat fit` latency on a 1,000-config catalogue (docs/planning.md).

The catalogue is bench_store's synthetic one (the shipped specs and prices under new config
hashes, published by `store.publish`). Each case runs the whole command in this process
(`speccat.flows.cli.main`, output discarded): the spec's lookup in the catalogue, pricing at
the asked setting for every layout, recompute costs, model states, the frontier per layout and
the ranking. The first call parses the data files (reported apart as `cold`); p50 and p95 are
over REPEATS calls after it. Target: p95 <= 200 ms.

Run: `make bench` or `python -m bench fit`.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_store import shipped_items, synthetic_catalogue

N_CONFIGS = 1_000
REPEATS = 25
TARGET_MS = 200
CASES = (  # (shipped repo, GPUs, sequence length)
    ("meta-llama/Llama-3.1-8B-Instruct", 8, 8192),
    ("Qwen/Qwen3-30B-A3B", 8, 32768),
    ("meta-llama/Llama-3.1-70B-Instruct", 64, 131072),
    ("deepseek-ai/DeepSeek-V3", 64, 4096),
)


def _call(argv: list[str]) -> float:
    from speccat.flows.cli import main

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    elapsed = (time.perf_counter() - started) * 1000
    if code != 0:
        raise RuntimeError(f"speccat {' '.join(argv)} exited {code}")
    return elapsed


def main() -> None:
    store_runs, items, failed = shipped_items()
    with tempfile.TemporaryDirectory() as tmp:
        path, publish_s, _ = synthetic_catalogue(store_runs, items, N_CONFIGS, Path(tmp))
        print(f"   {N_CONFIGS} configs published in {publish_s:.1f} s" + (f"; refused: {', '.join(failed)}" if failed else ""))
        copies = {}
        for item in store_runs.replicated(items, 1):
            copies.setdefault(item.spec["name"], item.repo_id)
        print(f"   {'repo':36} {'gpus':>5} {'seq':>7} {'rows':>5} {'cold ms':>8} {'p50 ms':>7} {'p95 ms':>7}   target p95 <= {TARGET_MS} ms")
        for repo, gpus, seq in CASES:
            if repo not in copies:
                print(f"   {repo:36} not in the catalogue")
                continue
            argv = ["fit", copies[repo], "--seq", str(seq), "--gpus", str(gpus), "--db", str(path), "--json", "--top", "0"]
            cold = _call(argv)
            with contextlib.redirect_stdout(io.StringIO()) as out:
                from speccat.flows.cli import main as cli_main

                cli_main(argv)
            import json

            rows = json.loads(out.getvalue())["fits"]
            times = sorted(_call(argv) for _ in range(REPEATS))
            p50 = statistics.median(times)
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            verdict = "ok" if p95 <= TARGET_MS else "MISSED"
            print(f"   {repo:36} {gpus:>5} {seq:>7} {rows:>5} {cold:8.1f} {p50:7.1f} {p95:7.1f}   {verdict}")


if __name__ == "__main__":
    main()
