"""Same: does a change that must not change any output leave every output as it was?

`python -m bench same --save DIR` writes what this tree produces to DIR; `python -m bench same
--against DIR` produces it again from the tree as it is now and compares it with DIR, value for
value (not part of a plain `python -m bench`: it takes minutes). A refactor is checked by saving
before it (or from a frozen copy of the code before it: put a `speccat` shim whose subpackages
link to that copy first on PYTHONPATH, as bench_drift's copy_project does) and comparing after.

What is dumped, in this interpreter, with speccat imported wherever this interpreter finds it:

1. specs.json: every shipped snapshot config (flows/snapshot/*/config.json of the speccat
   imported) by the night's own path, flows/analysis.py `analyse` at the default setting's
   sequence length: the spec as stored (parsed, plus the sha256 of its text, so a change of key
   order or formatting shows too) and the pricing refusal when there is one; a census refusal
   as {"refused": reason}, anything else raised as {"crash": its type}.
2. registry.json: every causal-LM model_type's default config (bench_registry's) censused at
   bench_registry.SEQ with run_census, in the same three shapes.
3. catalogue/: what `make catalogue` stores: the same `speccat refresh --source snapshot` in a
   fresh process (offline, a fresh Prefect home) into a scratch DuckDB file, then every row of
   every base table (views are queries over them), sorted, without the columns that differ
   between two runs of the same code (VOLATILE). Per table its columns, row count and the
   sha256 of its sorted rows (tables.json), and the rows as gzip JSON lines, so a difference
   can be shown and not only detected; and every table's and view's columns with their types
   and the comments the catalogue documents them with (schema.json).

Refusals are recognised by the `reason` every refusal of the project carries
(catalogue/errors.py's ReasonError), not by the census's own exception class, so the script
runs unchanged against a census whose modules were moved about. The comparison prints one line
per shipped config, registry type, table or schema object that differs (its first differing
JSON path or row), then `same: N shipped specs, M registry types, T tables (R rows)` (those
that match) and, when something differs, a `differ:` line; the exit status is 0 only when
everything matches, 1 otherwise, 2 when no dump could be made.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench import bench_registry as registry
from bench.bench_refresh import prefect_env

ROOT = Path(__file__).resolve().parent.parent
# Columns two refreshes of the same code into fresh catalogues store differently, left out of
# the comparison: the night's id (a fresh UUID each run, in every table that names the night)
# and its start and end times. Found by dumping two runs of the same tree and comparing: no
# table holds a duration, a host name or a path (the refresh's stage times are printed, not stored).
VOLATILE = {
    "runs": ("run_id", "started", "ended"),
    "repo_history": ("run_id",),
    "failures": ("run_id",),
}
BATCH = 50_000  # rows fetched from DuckDB at a time
SHOWN = 300  # characters of a value shown in a difference


# --------------------------------------------------------------------------- the dump


def _outcome(run: Callable[[], str | dict]) -> dict:
    """{"spec": the spec parsed, "spec_sha256": of its text} from `run()` (a spec's JSON text,
    or analyse's dict, whose `price_error` is kept too); {"refused": reason} for a refusal (any
    exception with a `reason`); {"crash": type name} for anything else raised."""
    try:
        result = run()
    except Exception as err:  # noqa: BLE001 - every outcome is kept, to be compared
        reason = getattr(err, "reason", None)
        return {"refused": reason} if reason is not None else {"crash": type(err).__name__}
    text = result if isinstance(result, str) else result["spec"]
    out = {"spec": json.loads(text), "spec_sha256": hashlib.sha256(text.encode()).hexdigest()}
    if isinstance(result, dict) and "price_error" in result:
        out["price_error"] = list(result["price_error"])
    return out


def shipped_specs() -> dict[str, dict]:
    """Every shipped snapshot config by the night's path (analyse), keyed by repo id."""
    import speccat.flows
    from speccat.catalogue.records.settings import default_setting
    from speccat.census import load_config_file
    from speccat.flows.analysis import analyse

    seq_length = default_setting()["seq_length"]

    def night(path: Path, repo: str) -> dict:
        return analyse(load_config_file(path), repo, seq_length)

    out = {}
    for path in sorted((Path(speccat.flows.__file__).parent / "snapshot").glob("*/config.json")):
        repo = path.parent.name.replace("__", "/", 1)
        out[repo] = _outcome(partial(night, path, repo))
    return out


def registry_specs() -> dict[str, dict]:
    """Every causal-LM model_type's default config censused at bench_registry.SEQ."""
    from speccat.census import run_census

    def census(model_type: str) -> str:
        return run_census(registry.default_config(model_type), name=model_type, seq_length=registry.SEQ).to_json()

    return {t: _outcome(partial(census, t)) for t in registry.model_types()}


def _cell(value):
    """A DuckDB value as JSON can hold it (timestamps, decimals, UUIDs as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_cell(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _cell(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def refresh_catalogue(scratch: Path) -> Path:
    """`make catalogue`'s command into scratch/catalogue.duckdb (a fresh Prefect home in scratch)."""
    import speccat.census

    db, env = scratch / "catalogue.duckdb", prefect_env(scratch)
    here = str(Path(speccat.census.__file__).parent)
    asked = subprocess.run([sys.executable, "-c", "import speccat.census; print(speccat.census.__file__)"],
                           cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    there = asked.stdout.strip() or asked.stderr.strip()[-500:]
    if asked.returncode != 0 or str(Path(there).parent) != here:  # the refresh would run other code than the rest of the dump
        raise RuntimeError(f"a child process imports speccat.census from {there}, this one from {here}")
    command = [sys.executable, "-m", "speccat.flows.cli", "refresh", "--source", "snapshot", "--db", str(db)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"speccat refresh exited {done.returncode}: {done.stderr.strip()[-3000:]}")
    return db


def dump_tables(db: Path, out: Path) -> dict[str, dict]:
    """Every base table of `db`, less VOLATILE, sorted: out/TABLE.jsonl.gz and {table: {columns,
    rows, sha256}} (the sha256 of the sorted rows' JSON lines); out/schema.json: every table's
    and view's {columns, types, comments}."""
    import duckdb

    out.mkdir(parents=True, exist_ok=True)
    tables = {}
    with duckdb.connect(str(db), read_only=True) as con:
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT temporary ORDER BY 1").fetchall()]
        for table in names:
            columns = [
                r[0]
                for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index", [table]).fetchall()
                if r[0] not in VOLATILE.get(table, ())
            ]
            select = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
            cursor = con.execute(f'SELECT {select} FROM "{table}" ORDER BY ALL')
            digest, count = hashlib.sha256(), 0
            with gzip.open(out / f"{table}.jsonl.gz", "wt", encoding="utf-8") as rows:
                while batch := cursor.fetchmany(BATCH):
                    for row in batch:
                        line = json.dumps([_cell(v) for v in row], ensure_ascii=False, separators=(",", ":")) + "\n"
                        rows.write(line)
                        digest.update(line.encode())
                    count += len(batch)
            tables[table] = {"columns": columns, "rows": count, "sha256": digest.hexdigest()}
        schema: dict[str, dict] = {}
        for name, column, data_type, comment in con.execute(
            "SELECT table_name, column_name, data_type, comment FROM duckdb_columns() WHERE schema_name = 'main' AND NOT internal ORDER BY table_name, column_index"
        ).fetchall():
            entry = schema.setdefault(name, {"columns": [], "types": {}, "comments": {}})
            entry["columns"].append(column)
            entry["types"][column] = data_type
            entry["comments"][column] = comment
    (out / "schema.json").write_text(json.dumps(schema, indent=1, ensure_ascii=False))
    return tables


def save(folder: Path) -> dict:
    """The three dumps of this interpreter's speccat into `folder`; returns its meta.json."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.getLogger("speccat.census").setLevel(logging.ERROR)
    import torch
    import transformers

    # a default config the model's own code cannot run fails in fake tensors, which log it at
    # length (set after importing torch, whose import sets its loggers' levels)
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

    import speccat.census

    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "source": str(Path(speccat.census.__file__).parent),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "python": sys.version.split()[0]},
        "volatile": VOLATILE,
        "seconds": {},
    }
    print(f"   speccat.census from {meta['source']} ({Path(meta['source']).resolve()})", flush=True)
    for name, make in (("specs", shipped_specs), ("registry", registry_specs)):
        started = time.perf_counter()
        data = make()
        (folder / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False))
        meta["seconds"][name] = round(time.perf_counter() - started, 1)
        print(f"   {name}: {len(data)} in {meta['seconds'][name]:.0f} s", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-same-") as tmp:
        db = refresh_catalogue(Path(tmp))
        meta["seconds"]["refresh"] = round(time.perf_counter() - started, 1)
        tables = dump_tables(db, folder / "catalogue")
    (folder / "catalogue" / "tables.json").write_text(json.dumps(tables, indent=1))
    meta["seconds"]["catalogue"] = round(time.perf_counter() - started, 1)
    print(f"   catalogue: {len(tables)} tables, {sum(t['rows'] for t in tables.values())} rows in {meta['seconds']['catalogue']:.0f} s"
          f" (the refresh {meta['seconds']['refresh']:.0f} s)", flush=True)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


# --------------------------------------------------------------------------- the comparison


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def first_difference(a, b, path: str = "$") -> tuple[str, object, object] | None:
    """The first JSON path where `a` and `b` differ, with both values there (None when equal).
    A missing key or list item reads as the string "<absent>"."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            if key not in a or key not in b:
                return f"{path}.{key}", a.get(key, "<absent>"), b.get(key, "<absent>")
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            if i >= len(a) or i >= len(b):
                return f"{path}[{i}]", a[i] if i < len(a) else "<absent>", b[i] if i < len(b) else "<absent>"
            found = first_difference(a[i], b[i], f"{path}[{i}]")
            if found:
                return found
        return None
    if type(a) is not type(b) or a != b:
        return path, a, b
    return None


def compare_outcomes(label: str, was: dict, now: dict) -> tuple[list[str], int]:
    """One line per key of `was` or `now` whose outcome differs; the number that match."""
    lines, same = [], 0
    for key in sorted({*was, *now}):
        if key not in was or key not in now:
            lines.append(f"   {label} {key}: {'only now' if key not in was else 'gone now'}")
            continue
        found = first_difference(was[key], now[key])
        if found is None:
            same += 1
        else:
            path, a, b = found
            lines.append(f"   {label} {key}: {path}: was {_short(a)}, now {_short(b)}")
    return lines, same


def _rows(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            yield line


def _row_difference(columns: list[str], was: Path, now: Path) -> str:
    """How many rows only one side holds, the first row (in sorted order) where the two sides
    part and, when both hold a row there, the columns that differ between the two."""
    before = Counter(hash(line) for line in _rows(was))
    after = Counter(hash(line) for line in _rows(now))
    counts = f"{sum((before - after).values())} rows only before, {sum((after - before).values())} only now; "
    del before, after
    a_only, b_only = None, None
    a_rows, b_rows = _rows(was), _rows(now)
    a, b = next(a_rows, None), next(b_rows, None)
    while a is not None or b is not None:
        if a == b:
            a, b = next(a_rows, None), next(b_rows, None)
            continue
        a_only, b_only = a, b
        break
    if a_only is None and b_only is None:
        return counts + "rows equal"
    a_row = dict(zip(columns, json.loads(a_only))) if a_only else None
    b_row = dict(zip(columns, json.loads(b_only))) if b_only else None
    if a_row is None or b_row is None:
        return counts + f"first row only {'now' if a_row is None else 'before'}: {_short(b_row or a_row)}"
    cells = []
    for column in columns:
        if a_row[column] != b_row[column]:
            x, y = a_row[column], b_row[column]
            if isinstance(x, str) and isinstance(y, str) and x[:1] in "{[" and y[:1] in "{[":  # a JSON column: its first path
                try:
                    path, x, y = first_difference(json.loads(x), json.loads(y)) or ("$", x, y)
                    column = f"{column} {path}"
                except ValueError:
                    pass
            cells.append(f"{column}: was {_short(x)}, now {_short(y)}")
    key = {c: a_row[c] for c in columns[:4] if a_row[c] == b_row[c]}
    return counts + f"first differing row {_short(key)}: " + "; ".join(cells)


def compare_tables(was: Path, now: Path) -> tuple[list[str], int, int]:
    """One line per table that differs; the number of tables that match and their rows."""
    old = json.loads((was / "tables.json").read_text())
    new = json.loads((now / "tables.json").read_text())
    lines, same, rows = [], 0, 0
    for table in sorted({*old, *new}):
        if table not in old or table not in new:
            lines.append(f"   table {table}: {'only now' if table not in old else 'gone now'}")
        elif old[table]["columns"] != new[table]["columns"]:
            lines.append(f"   table {table}: columns were {old[table]['columns']}, now {new[table]['columns']}")
        elif old[table]["sha256"] != new[table]["sha256"]:
            counts = f"{old[table]['rows']} rows, now {new[table]['rows']}"
            lines.append(f"   table {table}: {counts}: " + _row_difference(old[table]["columns"], was / f"{table}.jsonl.gz", now / f"{table}.jsonl.gz"))
        else:
            same += 1
            rows += old[table]["rows"]
    return lines, same, rows


def compare(was: Path, now: Path) -> tuple[list[str], int]:
    """The lines to print and the exit status (0: everything matches, else 1)."""
    lines = []
    a, b = (json.loads((folder / "meta.json").read_text()) for folder in (was, now))
    if a["versions"] != b["versions"]:
        lines.append(f"   note: saved under {a['versions']}, now under {b['versions']}: library differences show too")
    counts, totals, differing = {}, {}, []
    for name, label in (("specs", "spec"), ("registry", "registry")):
        old, new = (json.loads((folder / f"{name}.json").read_text()) for folder in (was, now))
        found, counts[name] = compare_outcomes(label, old, new)
        totals[name] = len({*old, *new})
        lines += found
    found, counts["tables"], rows = compare_tables(was / "catalogue", now / "catalogue")
    tables = json.loads((was / "catalogue" / "tables.json").read_text()).keys() | json.loads((now / "catalogue" / "tables.json").read_text()).keys()
    totals["tables"] = len(tables)
    lines += found
    old, new = (json.loads((folder / "catalogue" / "schema.json").read_text()) for folder in (was, now))
    found, counts["schema"] = compare_outcomes("schema", old, new)
    totals["schema"] = len({*old, *new})
    lines += found
    lines.append(f"same: {counts['specs']} shipped specs, {counts['registry']} registry types, {counts['tables']} tables ({rows} rows)")
    for name, label in (("specs", "shipped specs"), ("registry", "registry types"), ("tables", "tables' rows"), ("schema", "column lists of tables and views")):
        if counts[name] != totals[name]:
            differing.append(f"{totals[name] - counts[name]} of {totals[name]} {label}")
    if differing:
        lines.append("differ: " + ", ".join(differing))
    return lines, 1 if differing else 0


# --------------------------------------------------------------------------- entry point


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench same", description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--save", metavar="DIR", help="write this tree's outputs to DIR")
    what.add_argument("--against", metavar="DIR", help="compare this tree's outputs with those saved in DIR")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.save:
        try:
            save(Path(args.save))
        except RuntimeError as err:
            print(f"   same: no dump: {err}")
            return 2
        print(f"   saved to {args.save}")
        return 0
    was = Path(args.against)
    if not (was / "meta.json").is_file():
        print(f"   same: {was} holds no saved dump (meta.json): save one with --save")
        return 2
    now = Path(tempfile.mkdtemp(prefix="bench-same-now-"))
    try:
        try:
            save(now)
        except RuntimeError as err:
            print(f"   same: no dump: {err}")
            return 2
        lines, status = compare(was, now)
        print("\n".join(lines), flush=True)
        return status
    finally:
        shutil.rmtree(now, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
