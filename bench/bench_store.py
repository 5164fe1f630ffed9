"""The catalogue store: bulk ingest against row-by-row inserts, query latency, bytes per config.

1. Ingest: the price rows of one run (every shipped config that censuses, default grid),
   inserted from Arrow in one statement and with executemany row by row into the same table.
   Row-by-row is timed on the first ROW_SAMPLE rows (all of them would take minutes); both are
   reported as rows per second and their ratio.
2. Query latency: synthetic catalogues of 100 and 1,000 configs (the shipped specs and their
   prices under new config hashes, published by `store.publish`; the table fits_on's answers
   computed once for the shipped specs, timed, and copied under the same hashes), p50 of each
   sql/queries file over REPEATS runs. Targets: per-model queries and `fits_on` (one question
   about every model) <= 100 ms at 1,000 configs, other catalogue-wide ones <= 1 s.
3. Catalogue bytes per config at both sizes.

Run: `make bench` or `python -m bench store`.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROW_SAMPLE = 3_000
REPEATS = 9
SIZES = (100, 1_000)
# Queries about one model, with the parameters they are timed with; the rest are catalogue-wide.
PER_MODEL = {"model_bytes", "masks_ranked", "cheapest_saving"}
TARGET_MS = {"per-model": 100, "catalogue-wide": 1000, "one question": 100}
# Queries of one question about every model, with the parameters they are timed with.
QUESTIONS = {"fits_on": {"gpu_mem": "80GiB", "gpus": 8, "seq": 32768}}


def shipped_items():
    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(tests))
    from support import store_runs
    from conftest import repo_id_of, shipped_config_paths

    from speccat.catalogue.errors import ReasonError

    items, failed = [], []
    for path in shipped_config_paths():
        try:
            items.append(store_runs.censused(repo_id_of(path)))
        except ReasonError as err:  # refused by the census (SpecError) or by pricing (PricingError): reported, left out
            failed.append(f"{repo_id_of(path)} ({err.reason})")
    unique = list({i.config_hash: i for i in items}.values())
    return store_runs, unique, failed


def bench_ingest(store_runs, items) -> None:
    import duckdb

    from speccat.catalogue.store.file import create_schema

    run = store_runs.make_run("bench", items)
    layer = run.arrow_tables()["layer_prices"]
    with tempfile.TemporaryDirectory() as folder:
        con = duckdb.connect(str(Path(folder) / "ingest.duckdb"))
        create_schema(con)
        started = time.perf_counter()
        con.execute("INSERT INTO layer_prices BY NAME SELECT * FROM layer")
        con.execute("CHECKPOINT")
        bulk_s = time.perf_counter() - started
        con.execute("DELETE FROM layer_prices")
        columns = layer.column_names  # the staged table's own columns, whatever the key holds
        sample = layer.slice(0, ROW_SAMPLE).to_pylist()
        rows = [tuple(r[c] for c in columns) for r in sample]
        started = time.perf_counter()
        con.executemany(f"INSERT INTO layer_prices ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", rows)
        con.execute("CHECKPOINT")
        row_s = time.perf_counter() - started
        con.close()
    bulk_rate, row_rate = layer.num_rows / bulk_s, len(rows) / row_s
    print(f"   ingest of one run's layer prices ({len(items)} configs, {layer.num_rows:,} rows):")
    print(f"     Arrow, one statement   {bulk_rate:>14,.0f} rows/s  ({bulk_s:.2f} s for all rows)")
    print(f"     executemany, per row   {row_rate:>14,.0f} rows/s  (first {len(rows):,} rows)")
    print(f"     ratio                  {bulk_rate / row_rate:>14,.0f} x")


def synthetic_catalogue(store_runs, items, n: int, folder: Path) -> tuple[Path, float, str]:
    from speccat.catalogue.store.file import publish

    chosen = store_runs.replicated(items, math.ceil(n / len(items)))[:n]
    repos = [store_runs.repo_row(item, downloads=10 * (n - i)) for i, item in enumerate(chosen)]
    run = store_runs.make_run("bench-night", chosen, repos=repos)
    path = folder / f"catalogue-{n}.duckdb"
    started = time.perf_counter()
    publish(path, run)
    elapsed = time.perf_counter() - started
    copy_fits_on(store_runs, items, chosen, path, folder)
    return path, elapsed, chosen[0].repo_id


def copy_fits_on(store_runs, items, chosen, path: Path, folder: Path) -> None:
    """The synthetic catalogue's table fits_on: the shipped specs' answers, built once by a
    publish of them that states the questions (timed: what a night pays per new spec), copied
    under each copy's config hash, as its prices are, with the questions' reference rows."""
    import duckdb
    import pyarrow as pa

    from speccat.catalogue.store.file import publish

    answered = folder / "fits-on.duckdb"
    if not answered.exists():
        started = time.perf_counter()
        publish(answered, store_runs.make_run("bench-fits-on", items, fits_on=True))
        elapsed = time.perf_counter() - started
        print(f"   fits_on answered for {len(items)} shipped configs in a publish of {elapsed:.1f} s ({elapsed / len(items):.2f} s a config, with its ingest)")
    copies = pa.table({"config_hash": [c.config_hash for c in chosen], "source": [items[i % len(items)].config_hash for i in range(len(chosen))]})
    with contextlib.closing(duckdb.connect(str(path))) as con:
        con.execute(f"ATTACH '{answered}' AS answered (READ_ONLY)")
        con.register("copies", copies)
        for table in ("fits_on_sizes", "fits_on_layouts"):
            con.execute(f"INSERT INTO {table} SELECT * FROM answered.{table}")
        con.execute("INSERT INTO fits_on SELECT f.* REPLACE (c.config_hash AS config_hash) FROM answered.fits_on AS f "
                    "JOIN copies AS c ON c.source = f.config_hash ORDER BY c.config_hash")  # fmt: skip
        con.execute("CHECKPOINT")


def p50_ms(con, text: str, params: dict) -> float:
    from speccat.catalogue.store import present

    present.run(con, text, params)  # warm
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        present.run(con, text, params)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def bench_queries(store_runs, items) -> None:
    from speccat import sql
    from speccat.catalogue.store.file import open_readonly

    results: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            path, publish_s, repo_id = synthetic_catalogue(store_runs, items, n, Path(tmp))
            size = path.stat().st_size
            print(f"   {n:>5} configs: published in {publish_s:.1f} s, {size / 2**20:.1f} MiB, "
                  f"{size / n / 2**10:.0f} KiB per config")
            with contextlib.closing(open_readonly(path)) as con:
                for name, file in sql.queries().items():
                    params = {"repo_id": repo_id} if name in PER_MODEL else QUESTIONS.get(name, {})
                    results.setdefault(name, {})[n] = p50_ms(con, file.read_text(), params)
    print(f"   p50 latency (ms) of sql/queries over {REPEATS} runs:")
    print(f"     {'query':22} {'kind':15} " + " ".join(f"{n:>9}" for n in SIZES) + "   target")
    for name, by_size in results.items():
        kind = "per-model" if name in PER_MODEL else "one question" if name in QUESTIONS else "catalogue-wide"
        worst = by_size[SIZES[-1]]
        verdict = "ok" if worst <= TARGET_MS[kind] else "MISSED"
        cells = " ".join(f"{by_size[n]:9.1f}" for n in SIZES)
        print(f"     {name:22} {kind:15} {cells}   <= {TARGET_MS[kind]} ms {verdict}")


def main() -> None:
    store_runs, items, failed = shipped_items()
    print(f"   {len(items)} distinct shipped configs censused and priced" + (f"; refused: {', '.join(failed)}" if failed else ""))
    bench_ingest(store_runs, items)
    bench_queries(store_runs, items)


if __name__ == "__main__":
    main()
