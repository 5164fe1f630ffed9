"""Registry sweep: every causal-LM model_type of transformers, built from its default config, censused.

For each model_type of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`: its config class's defaults (as
JSON, the way a config.json reaches the census) are censused at a short sequence; whether
transformers itself can build the model from those defaults (on meta, its default attention)
is checked apart. Prints one row per model_type, the outcomes by reason, the share of the
buildable model types that give a spec, how many of those specs the records price within their
tolerance at the census's point (the others the night stores unpriced), and where the outcome
differs from tests/support/registry_refusals.yaml (the refusals the project states, each with its reason).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from pathlib import Path

from speccat.catalogue.datafile import read_yaml

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REFUSALS_PATH = Path(__file__).resolve().parent.parent / "tests" / "support" / "registry_refusals.yaml"
SEQ = 256
TARGET = 0.95


def load_refusals(path: Path = REFUSALS_PATH) -> dict:
    """{'not_buildable': {model_type: why}, 'refused': {model_type: {reason, why}}}."""
    data = read_yaml(path)
    return {"not_buildable": dict(data["not_buildable"]), "refused": dict(data["refused"])}


def model_types() -> list[str]:
    from transformers.models.auto import modeling_auto

    return sorted(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def default_config(model_type: str, **overrides) -> dict:
    """The config class's defaults as a config.json would state them, with `overrides` set."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    data = CONFIG_MAPPING[model_type]().to_dict()
    data["model_type"] = model_type
    return {**json.loads(json.dumps(data, default=str)), **overrides}


def buildable(model_type: str) -> bool:
    """Whether transformers builds the causal LM from the defaults (meta device, default attention)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config = CONFIG_MAPPING[model_type]()
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        return True
    except Exception:
        return False


def worst_ratio(spec) -> float:
    """The records' price over what the census measured, furthest from 1 over the spec's kinds
    and ends at the census's point (catalogue/records/points.py), priced from the night's inputs."""
    from speccat.catalogue.records import points
    from speccat.flows.analysis import pricing_inputs

    records, grid, _, ends = pricing_inputs()
    rows = points.price_points(spec, records, grid) + points.price_ends(spec, records, grid, ends)
    return points.worst_ratio(spec, rows)[2]


def sweep(types: list[str] | None = None) -> dict[str, dict]:
    """model_type → {buildable, outcome ('spec' or a reason code), message, seconds, and for a
    spec `ratio`: worst_ratio's}."""
    from speccat.census import run_census
    from speccat.census.spec import SpecError

    rows = {}
    for model_type in types or model_types():
        started = time.perf_counter()
        can_build = buildable(model_type)
        try:
            spec = run_census(default_config(model_type), name=model_type, seq_length=SEQ)
            outcome, message = "spec", " ".join(f"{g['kind']}×{g['count']}" for g in spec["layers"])
        except SpecError as err:
            outcome, message = err.reason, str(err)
        except Exception as err:  # a default config the census cannot even read is a crash to report
            outcome, message = "crash", f"{type(err).__name__}: {err}"
        rows[model_type] = {"buildable": can_build, "outcome": outcome, "message": message, "seconds": time.perf_counter() - started}
        if outcome == "spec":
            rows[model_type]["ratio"] = worst_ratio(spec)
    return rows


def differences(rows: dict[str, dict], refusals: dict) -> list[str]:
    """Where the sweep disagrees with the stated refusals (an empty list when it agrees)."""
    out = []
    for model_type, row in rows.items():
        if not row["buildable"]:
            if model_type not in refusals["not_buildable"]:
                out.append(f"{model_type}: transformers cannot build it from its defaults, but it is not listed as not_buildable")
            continue
        stated = refusals["refused"].get(model_type)
        if stated is None and row["outcome"] != "spec":
            out.append(f"{model_type}: {row['outcome']} ({row['message'][:160]}) but not listed")
        elif stated is not None and row["outcome"] != stated["reason"]:
            out.append(f"{model_type}: listed as {stated['reason']}, got {row['outcome']}")
    return out


def main() -> None:
    logging.getLogger("speccat.census").setLevel(logging.ERROR)
    rows = sweep()
    width = max(map(len, rows))
    for model_type, row in rows.items():
        mark = "" if row["buildable"] else "  (transformers cannot build its defaults)"
        print(f"   {model_type:<{width}}  {row['outcome']:<18} {row['message'][:110]}{mark}")
    built = {t: r for t, r in rows.items() if r["buildable"]}
    specs = sum(r["outcome"] == "spec" for r in built.values())
    print(f"\n   {len(rows)} causal-LM model types; {len(built)} buildable from their defaults; {specs} give a spec "
          f"({specs / len(built):.1%}, target {TARGET:.0%}: {'met' if specs / len(built) >= TARGET else 'MISSED'})")
    print("   outcomes of the buildable ones: " + ", ".join(f"{k} {v}" for k, v in Counter(r["outcome"] for r in built.values()).most_common()))
    from speccat.catalogue.records.oprecords import load_records

    tolerance = load_records().tolerance
    priced = {t: r["ratio"] for t, r in built.items() if "ratio" in r}
    off = {t: ratio for t, ratio in priced.items() if abs(ratio - 1) > tolerance}
    print(f"   of the {len(priced)} specs, {len(priced) - len(off)} are priced within the records' tolerance ({tolerance:.0%}) of what the census "
          f"measured at its point; the night refuses prices to the other {len(off)}:")
    print("     " + ", ".join(f"{t} {ratio:.3f}" for t, ratio in sorted(off.items())))
    slowest = sorted(rows, key=lambda t: rows[t]["seconds"], reverse=True)[:5]
    print("   slowest: " + ", ".join(f"{t} {rows[t]['seconds']:.2f} s" for t in slowest))
    diff = differences(rows, load_refusals())
    print(f"   against tests/support/registry_refusals.yaml: {'agrees' if not diff else f'{len(diff)} differences'}")
    for line in diff:
        print(f"     {line}")


if __name__ == "__main__":
    main()
