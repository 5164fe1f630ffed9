"""Where `speccat fit` gets its spec (docs/planning.md, "Any config, any stack"): CONFIG is a
config.json or a folder holding one, censused, priced and checked now as the night and
`speccat price` do it (flows/analysis.py `census_priced`: the catalogue need not hold it, a
model no night has seen, a config being designed), refused with the night's reason where the
night would store it unpriced; or a repo id the catalogue holds, whose spec the latest night
stored. A repo the latest night refused, at any stage, is refused with the night's reason and
message.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from speccat.catalogue.errors import InputError, ReasonError
from speccat.catalogue.vocabulary import REASONS


class NightRefusal(ReasonError):
    """A repo the catalogue's latest night refused, with the night's own reason (of whichever
    group of the vocabulary holds it: a census or fetch reason, a price stage's records reason)."""

    def __init__(self, reason: str, message: str):
        self.group = next(group for group, codes in REASONS.items() if reason in codes)
        super().__init__(reason, message)


def load_spec(args: argparse.Namespace) -> tuple[str, dict, str]:
    """(name, spec mapping, where it came from in words) for `args.config`."""
    path = Path(args.config)
    if path.is_dir() or path.is_file():
        return censused_now(args.config)
    from speccat.flows.cli_census import CONFIG_HELP

    if path.suffix == ".json" or args.config.count("/") != 1:
        raise InputError("not_found", f"{args.config}: no such file or folder (CONFIG is {CONFIG_HELP})")
    return stored(args)


def censused_now(text: str) -> tuple[str, dict, str]:
    """A config file or folder, censused and checked in this process (refusals are the census's,
    or the pricing's the night would store)."""
    from speccat.census.intake.config import precheck
    from speccat.flows.cli_census import read_config

    config, name = read_config(text)
    precheck(config)  # absurd configs are refused before torch is even imported
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is first imported
    from speccat.flows.analysis import census_priced

    spec = census_priced(config, name).checked()  # refused as the night refuses a spec it stores unpriced
    return name, spec.to_dict(), f"censused now from {text} (not from the catalogue)"


def stored(args: argparse.Namespace) -> tuple[str, dict, str]:
    """The stored repo id CONFIG names (exactly, else ignoring case) and the spec the latest
    night stored for it."""
    from speccat import sql
    from speccat.catalogue.store import present
    from speccat.flows.cli_options import catalogue_target

    with catalogue_target(args).open_readonly() as con:
        repo_id = present.resolve_repo_id(con, args.config)
        found = present.run(con, sql.load("show/spec"), {"repo_id": repo_id})
        refusal = present.run(con, sql.load("show/refusal"), {"repo_id": repo_id}).rows
    if refusal:
        stage, reason, message = refusal[0]
        raise NightRefusal(reason, f"{repo_id}: the latest night refused it at the {stage} stage: {message}")
    if not found.rows:
        raise InputError("not_found", f"{repo_id} has no spec at the latest census version (see speccat show {repo_id})")
    return repo_id, json.loads(found.rows[0][1]), f"the catalogue's spec (config {found.rows[0][0]})"
