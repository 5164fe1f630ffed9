"""Drift: does an upgrade of the libraries change what the night measures or prices?

`python -m bench drift [--registry] [--keep] [--against PYTHON]` (not part of a plain
`python -m bench`: it creates a virtual environment and installs into it).

1. A throwaway venv (`python -m venv` in a temporary folder, no system site-packages) gets
   the newest releases pyproject.toml's ranges allow: the project installed from a copy of
   this tree with `pip install --upgrade --upgrade-strategy eager`. torch stays the CPU build:
   it is pinned to the newest `+cpu` release inside pyproject's torch range that pip can see
   (the wheel in the find-links folder), else to the lock's own CPU build; the new venv is
   checked to hold no CUDA build. `--against PYTHON` compares against a venv already built
   instead (no network); `--keep` keeps the throwaway venv and prints where it is.
2. In the current venv (the lock's) and in that one, with speccat imported from one frozen copy
   of this tree (so only the libraries differ), one script (`python -m bench.bench_drift
   dump OUT`) censuses and prices every shipped snapshot config by the night's own code path
   (flows/analysis.py `analyse`: run_census across settings, pricing, check_prices), and with
   `--registry` every causal-LM model_type's default config too (bench/bench_registry.py's
   configs, ~150 s). Per (repo, kind) it writes the op counts, the bytes per token per op the
   census measured at its point, the records' price there, the worst priced/measured ratio over
   the kind's points and whether it is priced (`priced`; `unpriced: REASON` when the night
   stores the spec without prices, as when some kind is priced beyond the records' tolerance
   of what was measured; `refused: REASON` when the census refuses the config).
3. A table of every kind whose op counts, measured bytes, price or pricing changed, under a
   header naming both venvs' transformers and torch (and any other distribution whose version
   differs). The exit status is 1 when a kind that prices under the lock stops pricing under
   the newest releases, 2 when no comparison could be made (an install or a dump failed), else
   0. An empty table is a valid result: nothing drifted (or the ranges resolve to the versions
   already locked).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_refresh import prefect_env

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "flows" / "snapshot"
REL = 1e-9  # two byte counts or prices closer than this (relative) are the same
PRICED = "priced"
REGISTRY = "registry:"  # repo prefix of the registry sweep's model types


# --------------------------------------------------------------------------- the dump (runs in either venv)


def _kind_rows(spec, status: str) -> dict[str, dict]:
    """Per kind of a spec: op counts, measured bytes per token per op at the census's point, the
    records' price there, the worst priced/measured ratio over its points, and its pricing: the
    spec's `status`, which turns `unpriced: unsupported_layer` when some kind or end is priced
    beyond the records' tolerance of what was measured (the night's check_prices: no prices
    for the whole spec)."""
    from speccat.catalogue.records import points
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, ends = pricing_inputs()
    priced: dict[str, float] = {}
    ratios: dict[str, float] = {}
    try:
        rows = points.price_points(spec, records, grid) + points.price_ends(spec, records, grid, ends)
    except ValueError as err:  # no record prices some op of it: the night stores it unpriced
        rows = []
        status = status if status != PRICED else f"unpriced: {getattr(err, 'reason', 'bad_value')}"
    measured = points.measured_per_token(spec)
    for row in rows:
        key = (row["kind"], row["point"])
        if row["point"] == points.CENSUS_POINT:
            priced[row["kind"]] = row["priced_per_token"]
        if measured.get(key):
            ratio = row["priced_per_token"] / measured[key]
            if abs(ratio - 1) >= abs(ratios.get(row["kind"], 1.0) - 1):
                ratios[row["kind"]] = ratio
    if status == PRICED and any(abs(r - 1) > records.tolerance for r in ratios.values()):
        status = "unpriced: unsupported_layer"
    return {
        kind: {
            "ops": dict(ops),
            "measured": dict(spec.get("measured", {}).get(kind, {}).get("bytes_per_token", {})),
            "priced": priced.get(kind),
            "ratio": ratios.get(kind),
            "status": status,
        }
        for kind, ops in spec["ops"].items()
    }


def _analysed(config: dict, name: str, seq_length: int) -> dict[str, dict]:
    """One config by the night's code path: {kind: row}, or {"*": row} when the census refuses it."""
    from speccat.census.spec import ModelSpec, SpecError
    from speccat.flows.analysis import analyse

    try:
        result = analyse(config, name, seq_length)
    except SpecError as err:
        return {"*": {"ops": {}, "measured": {}, "priced": None, "ratio": None, "status": f"refused: {err.reason}"}}
    status = PRICED if "price_error" not in result else f"unpriced: {result['price_error'][0]}"
    return _kind_rows(ModelSpec.from_json(result["spec"]), status)


def _registry_rows(seq_length: int) -> dict[str, dict[str, dict]]:
    """Every causal-LM model_type's default config (bench_registry's), censused at its short
    sequence; the kinds as for a shipped config (no price tables: only the points are priced)."""
    from bench import bench_registry as registry
    from speccat.census import run_census
    from speccat.census.spec import SpecError

    out = {}
    for model_type in registry.model_types():
        try:
            spec = run_census(registry.default_config(model_type), name=model_type, seq_length=registry.SEQ)
        except SpecError as err:
            rows = {"*": {"ops": {}, "measured": {}, "priced": None, "ratio": None, "status": f"refused: {err.reason}"}}
        except Exception as err:  # a default config the census cannot read: a crash, kept as an outcome
            rows = {"*": {"ops": {}, "measured": {}, "priced": None, "ratio": None, "status": f"crash: {type(err).__name__}"}}
        else:
            rows = _kind_rows(spec, PRICED)
        out[f"{REGISTRY}{model_type}"] = rows
    return out


def _distributions() -> dict[str, str]:
    from importlib import metadata

    return {d.metadata["Name"].lower(): d.version for d in metadata.distributions() if d.metadata["Name"]}


def dump(registry: bool = False) -> dict:
    """This interpreter's census and pricing of every shipped config (and the registry's)."""
    import logging

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.getLogger("speccat.census").setLevel(logging.ERROR)
    import torch
    import transformers

    from speccat.catalogue.records.settings import default_setting
    from speccat.census import load_config_file

    seq_length = default_setting()["seq_length"]
    configs = {}
    for path in sorted(SNAPSHOT.glob("*/config.json")):
        repo = path.parent.name.replace("__", "/", 1)
        configs[repo] = _analysed(load_config_file(path), repo, seq_length)
    if registry:
        configs.update(_registry_rows(seq_length))
    import speccat.census

    return {
        "source": str(Path(speccat.census.__file__).parent),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__, "python": sys.version.split()[0]},
        "distributions": _distributions(),
        "seq_length": seq_length,
        "registry": registry,
        "configs": configs,
    }


# --------------------------------------------------------------------------- the comparison (pure)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= REL * max(abs(a), abs(b), 1.0)


def _op_diff(a: dict, b: dict, fmt) -> tuple[str, str]:
    """The ops whose values differ, as two cells (lock's, newest's)."""
    ops = [op for op in dict.fromkeys([*a, *b]) if not _same(a.get(op), b.get(op))]
    cell = lambda side: " ".join(f"{op} {fmt(side.get(op))}" for op in ops)  # noqa: E731
    return cell(a), cell(b)


def _bytes(value) -> str:
    return "-" if value is None else f"{value:g}"


def _pricing(row: dict | None) -> str:
    if row is None:
        return "absent"
    ratio = row.get("ratio")
    return row["status"] + ("" if ratio is None else f" ({ratio:.4f})")


def _changes(old: dict, new: dict) -> list[tuple[str, str, str]]:
    """(what, lock's, newest's) for each of ops, measured, priced and pricing that differ."""
    changes = []
    if old["ops"] != new["ops"]:
        changes.append(("ops", *_op_diff(old["ops"], new["ops"], lambda v: "-" if v is None else str(v))))
    if any(not _same(old["measured"].get(op), new["measured"].get(op)) for op in {*old["measured"], *new["measured"]}):
        changes.append(("measured", *_op_diff(old["measured"], new["measured"], _bytes)))
    if not _same(old["priced"], new["priced"]):
        changes.append(("priced", _bytes(old["priced"]), _bytes(new["priced"])))
    if old["status"] != new["status"] or not _same(old["ratio"], new["ratio"]):
        changes.append(("pricing", _pricing(old), _pricing(new)))
    return changes


def compare(lock: dict, newest: dict) -> tuple[list[dict], list[tuple[str, str]]]:
    """Every (repo, kind) that changed, with what changed (rows: repo, kind, what, lock, newest,
    stops), and the (repo, kind)s that price under the lock and stop pricing under the newest.
    A config refused on one side is compared by its pricing alone, kind by kind of the other side."""
    rows, stopped = [], []
    for repo in dict.fromkeys([*lock["configs"], *newest["configs"]]):
        old_kinds, new_kinds = lock["configs"].get(repo), newest["configs"].get(repo)
        if old_kinds is None or new_kinds is None:
            continue  # a config only one side ran (a model_type one transformers lacks)
        old_refused, new_refused = "*" in old_kinds, "*" in new_kinds
        if old_refused or new_refused:
            kinds = ["*"] if old_refused and new_refused else list(new_kinds if old_refused else old_kinds)
            pairs = [(k, old_kinds["*" if old_refused else k], new_kinds["*" if new_refused else k]) for k in kinds]
            pairs = [(k, old, new, [("pricing", _pricing(old), _pricing(new))] if old["status"] != new["status"] else []) for k, old, new in pairs]
        else:
            pairs = []
            for kind in dict.fromkeys([*old_kinds, *new_kinds]):
                old, new = old_kinds.get(kind), new_kinds.get(kind)
                if old is None or new is None:
                    pairs.append((kind, old, new, [("kind", "present" if old else "absent", "present" if new else "absent")]))
                else:
                    pairs.append((kind, old, new, _changes(old, new)))
        for kind, old, new, changes in pairs:
            stops = old is not None and old["status"] == PRICED and (new is None or new["status"] != PRICED)
            if stops:
                stopped.append((repo, kind))
                if not any(what == "pricing" for what, _, _ in changes):
                    changes.append(("pricing", _pricing(old), _pricing(new)))
            for what, was, now in changes:
                rows.append({"repo": repo, "kind": kind, "what": what, "lock": was, "newest": now, "stops": stops and what == "pricing"})
    return rows, stopped


def _label(dump_: dict) -> str:
    v = dump_["versions"]
    return f"transformers {v['transformers']}, torch {v['torch']}"


def report(lock: dict, newest: dict) -> tuple[str, int]:
    """The header, the table of changes and a verdict; the exit status (1 when a kind stops pricing)."""
    rows, stopped = compare(lock, newest)
    lines = [f"   lock:   {_label(lock)}", f"   newest: {_label(newest)}"]
    a, b = lock.get("distributions", {}), newest.get("distributions", {})
    differ = sorted(n for n in a.keys() & b.keys() if a[n] != b[n] and n != "speccat")
    lines.append("   distributions at other versions: " + (", ".join(f"{n} {a[n]} -> {b[n]}" for n in differ) or "none"))
    for side, names in (("the lock", a.keys() - b.keys()), ("the newest", b.keys() - a.keys())):
        if names:
            lines.append(f"   only under {side}: {', '.join(sorted(names))}")
    both = [r for r in lock["configs"] if r in newest["configs"]]
    kinds = sum(len(lock["configs"][r]) for r in both)
    lines.append(f"   {len(both)} configs, {kinds} (repo, kind)s compared at sequence length {lock['seq_length']}")
    if not rows:
        lines.append("   no kind changed: same op counts, measured bytes, prices and pricing")
    else:
        cols = ("repo", "kind", "what", "lock", "newest")
        width = {c: min(60, max(len(c), *(len(str(r[c])) for r in rows))) for c in cols}
        lines.append("   " + "  ".join(c.ljust(width[c]) for c in cols))
        for r in rows:
            cells = "  ".join(str(r[c])[: width[c]].ljust(width[c]) for c in cols)
            lines.append("   " + cells + ("  STOPS PRICING" if r["stops"] else ""))
        changed = len({(r["repo"], r["kind"]) for r in rows})
        lines.append(f"   {changed} (repo, kind)s changed")
    if stopped:
        lines.append(f"   {len(stopped)} kind(s) priced under the lock stop pricing under the newest: "
                     + ", ".join(f"{repo} {kind}" for repo, kind in stopped))
    return "\n".join(lines), 1 if stopped else 0


# --------------------------------------------------------------------------- venvs and processes


def run_dump(python: str | Path, out: Path, registry: bool, scratch: Path, shim: Path) -> dict:
    """The dump script in `python`'s venv (run from this tree's root, so `bench` imports), with
    speccat imported from `shim` (copy_project's): both sides run the same frozen copy of the
    code, so only the libraries differ, whatever is edited in this tree meanwhile."""
    command = [str(python), "-m", "bench.bench_drift", "dump", str(out)] + (["--registry"] if registry else [])
    env = {**prefect_env(scratch), "PYTHONPATH": str(shim)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the dump under {python} exited {done.returncode}: {done.stderr.strip()[-3000:]}")
    data = json.loads(out.read_text())
    if not data.get("source", "").startswith(str(shim)):
        raise RuntimeError(f"the dump under {python} imported speccat from {data.get('source')}, not from the copy in {shim}")
    return data


def copy_project(folder: Path) -> tuple[Path, Path]:
    """A copy of the project in folder/src (what pip builds the new venv from, so the build
    writes no build/ or egg-info into this tree), and folder/shim: a `speccat` package whose
    subpackages link to the copy (pyproject's package-dir), put first on both dumps' path."""
    source, shim = folder / "src", folder / "shim" / "speccat"
    source.mkdir(parents=True)
    shim.mkdir(parents=True)
    for name in project_files():
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    (shim / "__init__.py").write_text("")
    import tomllib

    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder_name in package_dir.items():
        parts = package.split(".")
        if len(parts) == 2 and parts[0] == "speccat":  # nested packages come with their parent's folder
            (shim / parts[1]).symlink_to(source / folder_name, target_is_directory=True)
    return source, shim.parent


def _python_says(python: str | Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def torch_requirement() -> str:
    """pyproject.toml's torch requirement, e.g. `torch>=2.13,<2.14`."""
    import tomllib

    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in deps if Requirement(d).name.lower() == "torch")


def project_files() -> list[str]:
    """What a copy of the tree needs to build the project: pyproject.toml, its readme and the
    top folders of its packages (tool.setuptools.package-dir)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    readme = project["project"].get("readme")
    folders = {folder.split("/", 1)[0] for folder in project["tool"]["setuptools"]["package-dir"].values()}
    return ["pyproject.toml", *([readme] if isinstance(readme, str) else []), *sorted(folders)]


def cpu_torch_pin(lock_python: str | Path) -> str:
    """`torch==X+cpu`: the newest CPU build inside pyproject's range that pip sees, else the
    lock's own build. Never a bare version, which a resolver may meet with a CUDA build."""
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    spec = Requirement(torch_requirement()).specifier
    seen = []
    done = subprocess.run([str(lock_python), "-m", "pip", "index", "versions", "torch"], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            for text in line.split(":", 1)[1].split(","):
                try:
                    version = Version(text.strip())
                except InvalidVersion:
                    continue
                if version.local == "cpu" and spec.contains(version, prereleases=False):
                    seen.append(version)
    if seen:
        return f"torch=={max(seen)}"
    locked = _python_says(lock_python, "import torch; print(torch.__version__)")
    if not locked.endswith("+cpu"):
        raise RuntimeError(f"no CPU build of torch in {spec} is visible to pip and the lock's torch {locked} is not one")
    return f"torch=={locked}"


def _pip(python: Path, log: Path, *args: str) -> None:
    """pip in the new venv, its output appended to `log`; on failure, its tail raised."""
    with log.open("a") as out:
        done = subprocess.run([str(python), "-m", "pip", *args], stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise RuntimeError(f"pip {' '.join(args)} exited {done.returncode}:\n{tail}")


def build_venv(folder: Path, lock_python: str | Path) -> Path:
    """A fresh venv in folder/venv with the newest releases pyproject.toml allows (torch: CPU),
    the project installed from folder/src (copy_project's)."""
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    python = folder / "venv" / "bin" / "python"
    source = folder / "src"
    pin = cpu_torch_pin(lock_python)
    print(f"   installing the newest releases pyproject.toml allows into {folder / 'venv'} ({pin})", flush=True)
    started = time.perf_counter()
    _pip(python, folder / "pip.log", "install", "--upgrade", "pip")
    _pip(python, folder / "pip.log", "install", "--upgrade", "--upgrade-strategy", "eager", pin, str(source))
    print(f"   installed in {time.perf_counter() - started:.0f} s (pip's output: {folder / 'pip.log'}, kept with --keep)", flush=True)
    cuda = _python_says(python, "import torch; print(torch.version.cuda)")
    nvidia = [d for d in _python_says(python, "import importlib.metadata as m; print(' '.join(d.metadata['Name'] for d in m.distributions()))").split() if d.lower().startswith("nvidia")]
    if cuda != "None" or nvidia:
        raise RuntimeError(f"the new venv holds a CUDA build (torch.version.cuda {cuda}; {nvidia}): refusing to compare")
    return python


# --------------------------------------------------------------------------- entry points


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", action="store_true", help="also sweep every causal-LM model_type's default config (~150 s a venv)")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway venv and print where it is")
    parser.add_argument("--against", metavar="PYTHON", help="compare against this venv's python instead of building one")
    parser.add_argument("--lock", metavar="PYTHON", default=sys.executable, help="the lock's python (default: this one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-drift-"))
    keep = args.keep and not args.against
    try:
        try:
            _, shim = copy_project(scratch)
            newest_python = Path(args.against) if args.against else build_venv(scratch, args.lock)
            dumps = {}
            for side, python in (("lock", args.lock), ("newest", newest_python)):
                started = time.perf_counter()
                dumps[side] = run_dump(python, scratch / f"{side}.json", args.registry, scratch, shim)
                print(f"   {side}: dumped {len(dumps[side]['configs'])} configs under {_label(dumps[side])} in {time.perf_counter() - started:.0f} s", flush=True)
        except (RuntimeError, subprocess.CalledProcessError) as err:  # no comparison: neither a pass nor a drift
            print(f"   drift: no comparison: {err}")
            return 2
        text, status = report(dumps["lock"], dumps["newest"])
        print(text)
        return status
    finally:
        if keep:
            print(f"   kept: {scratch} (venv: {scratch / 'venv'}, dumps: lock.json, newest.json)")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def dump_main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.write_text(json.dumps(dump(registry="--registry" in argv[1:]), indent=1, sort_keys=True))


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"]:
        dump_main(sys.argv[2:])
    else:
        sys.exit(main())
