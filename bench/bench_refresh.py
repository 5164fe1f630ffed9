"""The snapshot refresh, as `make catalogue` runs it: cold, warm, and the census stage's scaling.

Each run is `speccat refresh --source snapshot` in a fresh process (offline, Prefect's
ephemeral API), into a scratch folder, so every figure includes what an operator waits for:

1. cold: a new Prefect home (its database is created) and no catalogue: every config is
   censused and priced;
2. warm: the same command again, nothing changed (target: at most 20 s, Prefect's start
   included);
3. the census stage with `--rebuild --workers 2` against `--workers 1`, in two fresh
   catalogues: the stage's wall time from the flow's own counts (target: at least 1.6x on
   two cores). The fork server's one-time import of torch and the census before the stage
   (`census_start`) is the same for both and is printed apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARM_TARGET_S = 20.0
PARALLEL_TARGET = 1.6


def refresh(scratch: Path, db: str, *extra: str) -> tuple[float, dict]:
    env = {
        **os.environ,
        "PREFECT_HOME": str(scratch / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    command = [sys.executable, "-m", "speccat.flows.cli", "refresh", "--source", "snapshot", "--db", str(scratch / db), "--json", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[3:])} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return wall, json.loads(done.stdout)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-refresh-") as tmp:
        scratch = Path(tmp)
        cold_s, cold = refresh(scratch, "catalogue.duckdb")
        print(f"   cold refresh: {cold_s:6.1f} s  ({cold['repos']} repos, {cold['censused']} censused; stages {cold['stage_seconds']})")
        warm_s, warm = refresh(scratch, "catalogue.duckdb")
        verdict = "ok" if warm_s <= WARM_TARGET_S else f"OVER the {WARM_TARGET_S:g} s target"
        print(f"   warm refresh: {warm_s:6.1f} s  ({warm['censused']} censused; stages {warm['stage_seconds']})  {verdict}")
        print(f"   cold / warm: {cold_s / warm_s:.1f}x")

        _, two = refresh(scratch, "two.duckdb", "--rebuild", "--workers", "2")
        _, one = refresh(scratch, "one.duckdb", "--rebuild", "--workers", "1")
        parallel, serial = two["stage_seconds"]["census"], one["stage_seconds"]["census"]
        ratio = serial / parallel
        verdict = "ok" if ratio >= PARALLEL_TARGET else f"UNDER the {PARALLEL_TARGET}x target"
        start = (one["stage_seconds"]["census_start"], two["stage_seconds"]["census_start"])
        print(f"   census stage, {two['censused']} configs: 1 process {serial:.1f} s, 2 processes {parallel:.1f} s")
        print(f"   (census processes started, once before the stage: {start[0]:.1f} s and {start[1]:.1f} s)")
        print(f"   parallel speed-up: {ratio:.2f}x on {os.cpu_count()} cores  {verdict}")


if __name__ == "__main__":
    main()
