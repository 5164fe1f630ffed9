"""NightData: everything one night of the pipeline hands the store, and its Arrow staging.

The flow fills a NightData with plain values (mappings, sequences, pyarrow tables) and calls
`speccat.catalogue.store.file.publish(db_path, night)`. Only what is new tonight needs to be in
`configs`, `specs` and `prices`: whatever the published catalogue already holds at the same
census and records versions, measured by the same transformers and torch, is carried over. `repos` lists every repo the source listed
tonight (including those whose fetch failed, with config_hash None) and `failures` says why.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.store.spool import KeyedPrices
from speccat.catalogue.vocabulary import END_PARTS, FAILURE_REASONS, GATING, RUN_STATUSES, SOURCES

# runs.<key>_version columns, in order (speccat, transformers, torch, records,
# profiles, settings; plus the census version every spec is keyed by).
VERSION_KEYS: tuple[str, ...] = (
    "speccat",
    "transformers",
    "torch",
    "census",
    "records",
    "profiles",
    "settings",
)
REPO_FIELDS: tuple[str, ...] = (
    "repo_id",
    "sha",
    "last_modified",
    "downloads",
    "likes",
    "gated",
    "license",
    "pipeline_tag",
    "config_hash",
    "hub_params",
    "hub_params_by_dtype",
    "config_parts",
)
# The Hub's parameter counts per dtype, as repo_history stores them (MAP(VARCHAR, BIGINT)).
HUB_PARAMS_BY_DTYPE = pa.map_(pa.string(), pa.int64())
FAILURE_FIELDS: tuple[str, ...] = ("repo_id", "stage", "reason", "message")
# A `--scope all` Hub night's crawl row (sql/schema/tables/crawls.sql; flows/crawl.py).
CRAWL_FIELDS: tuple[str, ...] = (
    "listing", "tier", "since", "next_since", "listing_complete", "n_listed", "n_fetched", "n_unchanged", "n_pending",
    "n_gone", "api_requests", "resolver_requests", "windows", "waited_s", "stopped",
)
INFEASIBLE_FIELDS: tuple[str, ...] = ("kind", "setting_id", "rule", "message")
POINT_PRICE_FIELDS: tuple[str, ...] = ("kind", "point", "priced_per_token", "forward_flops", "backward_peak_per_token")
# fields a row may leave None: a backward peak the records do not price (a spec with no working set)
OPTIONAL_ROW_FIELDS = frozenset({"backward_peak_per_token"})
END_PRICE_FIELDS: tuple[str, ...] = ("setting_id", *END_PARTS)
LOSS_PRICE_FIELDS: tuple[str, ...] = ("setting_id", "loss", "kept_bytes", "working_bytes")
OP_COST_FIELDS: tuple[str, ...] = ("kind", "setting_id", "op", "recompute_flops", "recompute_bytes")
OP_PRICE_FIELDS: tuple[str, ...] = ("kind", "setting_id", "part", "op", "kept_bytes", "full_bytes")
# The reference tables a night states from the data files, each a field of NightData of its name:
# states.yaml's sharding, the ops each switch set re-runs and keeps, accelerators.yaml,
# schedules.yaml, ends.yaml's loss kernels, the frameworks' flags (flags.yaml), the questions
# the table fits_on answers and the rules that reconcile the census's parameter counts with the
# Hub's (catalogue/hub_params.yaml).
DATA_FILE_TABLES: tuple[str, ...] = (
    "state_sharding", "switch_ops", "switch_kept", "accelerators", "schedules", "losses", "framework_flags", "flag_sets",
    "fits_on_sizes", "fits_on_layouts", "param_rules",
)
LAYER_PRICE_COLUMNS: tuple[str, ...] = ("kind", "setting_id", "mask", "attention", "ffn", "norm", "total")
FULL_PRICE_COLUMNS: tuple[str, ...] = ("kind", "setting_id", "kept")
# columns a price table may lack (prices from before they were priced): null when it does
OPTIONAL_PRICE_COLUMNS = frozenset({"backward_peak"})
SWITCH_COST_COLUMNS: tuple[str, ...] = (
    "kind", "setting_id", "mask", "recompute_flops", "recompute_bytes", "step_flops", "representative", "on_frontier",
)
# The price tables as staged: the catalogue tables' columns, in their order (sql/schema.sql).
_KEY = pa.dictionary(pa.int32(), pa.string())
# What identifies a measurement: the config, the census's version and the libraries it ran on.
_SPEC_KEY = [("config_hash", _KEY), ("census_version", _KEY), ("transformers_version", _KEY), ("torch_version", _KEY)]
STAGED_PRICES: dict[str, pa.Schema] = {
    "layer_prices": pa.schema(
        [*_SPEC_KEY, ("kind", pa.string()), ("setting_id", pa.string()), ("mask", pa.int16()), ("records_version", _KEY)]
        + [(c, pa.float64()) for c in ("attention", "ffn", "norm", "total")]
    ),
    "full_prices": pa.schema(
        [*_SPEC_KEY, ("kind", pa.string()), ("setting_id", pa.string()), ("records_version", _KEY), ("kept", pa.float64()),
         ("backward_peak", pa.float64())]
    ),
    "switch_costs": pa.schema(
        [*_SPEC_KEY, ("kind", pa.string()), ("setting_id", pa.string()), ("mask", pa.int16()), ("records_version", _KEY)]
        + [(c, pa.float64()) for c in ("recompute_flops", "recompute_bytes", "step_flops")]
        + [("representative", pa.int16()), ("on_frontier", pa.bool_())]
    ),
}
# One config's rows of a table the night states per config: mappings, or an Arrow table of them.
Rows = Sequence[Mapping[str, Any]] | pa.Table
_PRICE_PARTS = (("layer_prices", LAYER_PRICE_COLUMNS), ("full_prices", FULL_PRICE_COLUMNS), ("switch_costs", SWITCH_COST_COLUMNS))


class StoreError(ReasonError):
    """A refusal of the store: a code of the vocabulary's `store` group (catalogue/vocabulary.yaml)."""

    group = "store"


@dataclass(frozen=True)
class NightData:
    """One night of the pipeline, as the store ingests it (one row of `runs` and what it adds).

    versions: {speccat, transformers, torch, census, records, profiles, settings} -> str.
    settings: the setting rows (catalogue/records/settings.py `Grid.stored`: the grid's, the
        routing skew's overload settings and the memory curve's), each with setting_id.
    setting_defaults: the grid's default setting (`Grid.setting({})`, with its setting_id), which
        the catalogue's views use for a field a query leaves unchosen.
    switches: the records' switch names in mask-bit order (`Records.switches`).
    repos: mappings with REPO_FIELDS (missing keys are None; gated is False/"auto"/"manual";
        hub_params the Hub's safetensors total and hub_params_by_dtype its counts per dtype, a
        mapping of counts not below 0, both None where the source states none; config_parts
        the names of the fetched config's parts its language model leaves out, None when no
        config was fetched).
    configs: config_hash -> the config mapping (its model_type is stored as a column).
    specs: config_hash -> ModelSpec mapping, censused at versions["census"] with
        versions["transformers"] and versions["torch"] (stored with them: part of its key).
    prices: config_hash -> PriceTables (attributes or keys `layer_prices`, `full_prices`,
        `switch_costs`: pyarrow tables with LAYER_PRICE_COLUMNS, FULL_PRICE_COLUMNS and
        SWITCH_COST_COLUMNS, the last one row per (kind, setting) of full_prices and switch
        set (its mask), plus mask -1 for full recompute), at versions["records"]; or the
        same tables spooled to disk (catalogue/store/spool.py SpooledPrices).
        A setting where the model cannot be laid out has no prices ...
    Each config's rows of infeasible, point_prices, end_prices, loss_prices, op_costs and op_prices
    below are a sequence of mappings or a pyarrow Table with those columns: a first night of
    thousands of configs holds millions of op_costs rows, which as Python mappings took gigabytes.
    infeasible: config_hash -> rows with INFEASIBLE_FIELDS, one per kind that cannot be laid
        out at such a setting (catalogue/records/layouts.py), with the rule and why.
    point_prices: config_hash -> rows with POINT_PRICE_FIELDS: the records' price at each
        setting its spec was measured at (catalogue/records/points.py).
    end_prices: config_hash -> rows with END_PRICE_FIELDS: the bytes the model's ends keep at
        each setting it is priced at (catalogue/records/ends.py `end_prices`).
    loss_prices: config_hash -> rows with LOSS_PRICE_FIELDS: the logits end under each loss
        kernel of `losses`, once at each setting the config is priced at (ends.py `loss_prices`).
    op_costs: config_hash -> rows with OP_COST_FIELDS: each op's recompute cost per kind at each
        setting it is priced at (catalogue/records/cost.py `OpCosts.rows`).
    op_prices: config_hash -> rows with OP_PRICE_FIELDS: each op's share of a layer's bytes per
        kind at each setting of the memory curve (catalogue/records/opsplit.py `op_prices`).
    state_sharding: states.yaml as rows (catalogue/records/states.py `state_sharding_rows`).
    switch_ops: (mask, op) rows, the ops each switch set recomputes (cost.py `switch_op_rows`).
    switch_kept: (mask, op) rows, the ops each switch set keeps (opsplit.py `switch_kept_rows`).
    accelerators: accelerators.yaml as rows (cost.py `accelerator_rows`).
    schedules: schedules.yaml as rows (catalogue/records/schedules.py `Schedules.rows`).
    losses: ends.yaml's loss kernels as rows (catalogue/records/ends.py `Ends.rows`).
    framework_flags, flag_sets: flags.yaml as rows (catalogue/records/flags.py `flag_rows`).
    fits_on_sizes, fits_on_layouts: the questions the table fits_on answers, as rows
        (catalogue/records/fits_on.py `plan_rows`); a night that states none builds no fits_on rows.
    param_rules: catalogue/hub_params.yaml's rules as rows (catalogue/hub_params.py `rule_rows`).
    failures: mappings with FAILURE_FIELDS; stage and reason are codes of
        catalogue/vocabulary.yaml (`stage`, and a `census` or `fetch` reason).
    reason, message: why a `failed` night failed (a `census` or `fetch` reason and one line);
        None for any other status.
    """

    run_id: str
    started: datetime
    ended: datetime
    status: str
    source: str
    versions: Mapping[str, str]
    settings: Sequence[Mapping[str, Any]]
    setting_defaults: Mapping[str, Any]
    switches: Sequence[str]
    repos: Sequence[Mapping[str, Any]] = ()
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    specs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    prices: Mapping[str, Any] = field(default_factory=dict)
    failures: Sequence[Mapping[str, Any]] = ()
    infeasible: Mapping[str, Rows] = field(default_factory=dict)
    point_prices: Mapping[str, Rows] = field(default_factory=dict)
    end_prices: Mapping[str, Rows] = field(default_factory=dict)
    loss_prices: Mapping[str, Rows] = field(default_factory=dict)
    op_costs: Mapping[str, Rows] = field(default_factory=dict)
    op_prices: Mapping[str, Rows] = field(default_factory=dict)
    state_sharding: Sequence[Mapping[str, Any]] = ()
    switch_ops: Sequence[Mapping[str, Any]] = ()
    switch_kept: Sequence[Mapping[str, Any]] = ()
    accelerators: Sequence[Mapping[str, Any]] = ()
    schedules: Sequence[Mapping[str, Any]] = ()
    losses: Sequence[Mapping[str, Any]] = ()
    framework_flags: Sequence[Mapping[str, Any]] = ()
    flag_sets: Sequence[Mapping[str, Any]] = ()
    fits_on_sizes: Sequence[Mapping[str, Any]] = ()
    fits_on_layouts: Sequence[Mapping[str, Any]] = ()
    param_rules: Sequence[Mapping[str, Any]] = ()
    crawl: Mapping[str, Any] | None = None  # CRAWL_FIELDS: a `--scope all` Hub night's crawl, else None
    # A directory the staged price tables are written to instead of held in memory (a night of
    # thousands of configs: catalogue/store/spool.py); None holds them in memory.
    spool: str | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def census_version(self) -> str:
        return self.versions["census"]

    @property
    def records_version(self) -> str:
        return self.versions["records"]

    @property
    def spec_key(self) -> dict[str, str]:
        """The versions that, with a config_hash, identify tonight's measurements: the census's
        and the transformers and torch packages' (every spec table's key)."""
        return {
            "census_version": self.census_version,
            "transformers_version": self.versions["transformers"],
            "torch_version": self.versions["torch"],
        }

    def validate(self) -> None:
        """Raise StoreError("bad_run") naming the first malformed field."""
        if not isinstance(self.run_id, str) or not self.run_id:
            _bad("run_id", f"must be a non-empty string, got {self.run_id!r}")
        for name in ("started", "ended"):
            value = getattr(self, name)
            if not isinstance(value, datetime) or value.tzinfo is None:
                _bad(name, f"must be a timezone-aware datetime, got {value!r}")
        if self.ended < self.started:
            _bad("ended", f"{self.ended} is before started {self.started}")
        if self.status not in RUN_STATUSES:
            _bad("status", f"{self.status!r} is not one of {RUN_STATUSES}")
        if (self.reason is None) != (self.status != "failed") or (self.message is None) != (self.reason is None):
            _bad("reason", f"a failed night, and only one, has a reason and a message; status {self.status!r}, reason {self.reason!r}")
        if self.reason is not None and self.reason not in FAILURE_REASONS:
            _bad("reason", f"{self.reason!r} is not a census or fetch reason")
        if self.source not in SOURCES:
            _bad("source", f"{self.source!r} is not one of {SOURCES}")
        missing = [k for k in VERSION_KEYS if not isinstance(self.versions.get(k), str) or not self.versions[k]]
        unknown = sorted(set(self.versions) - set(VERSION_KEYS))
        if missing or unknown:
            _bad("versions", f"needs non-empty strings for {list(VERSION_KEYS)}; missing {missing}, unknown {unknown}")
        if not self.switches or len(set(self.switches)) != len(self.switches):
            _bad("switches", f"must be distinct switch names in mask-bit order, got {list(self.switches)}")
        for i, setting in enumerate(self.settings):
            if not isinstance(setting, Mapping) or not setting.get("setting_id"):
                _bad(f"settings[{i}]", "must be a mapping with a setting_id")
        if not isinstance(self.setting_defaults, Mapping) or not self.setting_defaults.get("setting_id"):
            _bad("setting_defaults", "must be the grid's default setting, a mapping with a setting_id")
        for i, repo in enumerate(self.repos):
            _check_row(f"repos[{i}]", repo, REPO_FIELDS, required=("repo_id",))
            if repo.get("gated") is not None and repo["gated"] not in GATING:
                _bad(f"repos[{i}].gated", f"{repo['gated']!r} is not one of False, 'auto', 'manual' or None")
            _check_hub_params(f"repos[{i}]", repo)
        for i, failure in enumerate(self.failures):
            _check_row(f"failures[{i}]", failure, FAILURE_FIELDS, required=FAILURE_FIELDS)
        if self.crawl is not None:
            _check_row("crawl", self.crawl, CRAWL_FIELDS, required=("listing", "tier", "listing_complete"))
        for config_hash, spec in self.specs.items():
            if not isinstance(spec, Mapping) or "layers" not in spec:
                _bad(f"specs[{config_hash!r}]", "must be a ModelSpec mapping")
        for name, per_config, fields in self._per_config_rows():
            for config_hash, rows in per_config.items():
                if config_hash not in self.prices:
                    _bad(f"{name}[{config_hash!r}]", "names a config without prices tonight")
                _check_rows(f"{name}[{config_hash!r}]", rows, fields, tuple(f for f in fields if f not in OPTIONAL_ROW_FIELDS))

    def _per_config_rows(self) -> tuple[tuple[str, Mapping[str, Rows], tuple[str, ...]], ...]:
        """(table, config_hash -> rows, fields) of the tables whose rows the night states per config."""
        return (
            ("infeasible_settings", self.infeasible, INFEASIBLE_FIELDS), ("point_prices", self.point_prices, POINT_PRICE_FIELDS),
            ("end_prices", self.end_prices, END_PRICE_FIELDS), ("loss_prices", self.loss_prices, LOSS_PRICE_FIELDS),
            ("op_costs", self.op_costs, OP_COST_FIELDS), ("op_prices", self.op_prices, OP_PRICE_FIELDS),
        )  # fmt: skip

    def arrow_tables(self) -> dict[str, pa.Table]:
        """The run as Arrow tables named like the `incoming` staging tables of the store."""
        versions = {f"{k}_version": self.versions[k] for k in VERSION_KEYS}
        config_hashes = {r.get("config_hash") for r in self.repos} - {None}
        runs = [
            {
                "run_id": self.run_id,
                "started": self.started,
                "ended": self.ended,
                "status": self.status,
                "source": self.source,
                **versions,
                "n_repos": len(self.repos),
                "n_configs": len(config_hashes),
                "n_specs": len(self.specs),
                "n_failures": len(self.failures),
                "reason": self.reason,
                "message": self.message,
            }
        ]
        history = [
            {
                **{k: repo.get(k) for k in REPO_FIELDS},
                "run_id": self.run_id,
                "gated": None if repo.get("gated") is None else GATING[repo["gated"]],
                "config_parts": None if repo.get("config_parts") is None else list(repo["config_parts"]),
            }
            for repo in self.repos
        ]
        by_dtype = [None if r.get("hub_params_by_dtype") is None else sorted(r["hub_params_by_dtype"].items()) for r in self.repos]
        failures = [{**{k: f[k] for k in FAILURE_FIELDS}, "run_id": self.run_id} for f in self.failures]
        tables = {
            "runs": pa.Table.from_pylist(runs),
            "repo_history": _with_column(_table(history, ("run_id",) + REPO_FIELDS), "hub_params_by_dtype", by_dtype, HUB_PARAMS_BY_DTYPE),
            "failures": _table(failures, ("run_id",) + FAILURE_FIELDS),
            "crawls": _table(
                [] if self.crawl is None else [{"run_id": self.run_id, **{k: self.crawl.get(k) for k in CRAWL_FIELDS}}],
                ("run_id",) + CRAWL_FIELDS,
            ),
            "settings": pa.Table.from_pylist([dict(s) for s in self.settings]),
            "setting_defaults": pa.Table.from_pylist([dict(self.setting_defaults)]),
            "switch_sets": pa.Table.from_pylist(switch_set_rows(self.switches)),
            "raw_configs": _table(
                [{"config_hash": h, "config": _canonical(c)} for h, c in sorted(self.configs.items())],
                ("config_hash", "config"),
            ),
            "raw_specs": _table(
                [
                    {"config_hash": h, **self.spec_key, "spec": _canonical(s)}
                    for h, s in sorted(self.specs.items())
                ],
                ("config_hash", *self.spec_key, "spec"),
            ),
        }
        prices, priced = self._price_tables()
        tables.update(prices)
        keys = {**self.spec_key, "records_version": self.records_version}
        for name, per_config, fields in self._per_config_rows():  # keyed by the config and tonight's versions
            keyed = [_keyed(_arrow(rows), {"config_hash": h, **keys}) for h, rows in sorted(per_config.items()) if len(rows)]
            # a column may be all nulls in one config's rows, or a whole number in one and not in another
            tables[name] = pa.concat_tables(keyed, promote_options="permissive") if keyed else _table([], ("config_hash", *keys) + fields)
        for name in DATA_FILE_TABLES:
            rows = getattr(self, name)
            if rows:  # a run that states none (a failed night) leaves the stored rows as they are
                tables[name] = pa.Table.from_pylist([dict(row) for row in rows])
        both = sorted({(h, s) for h, rows in self.infeasible.items() for s in _column(rows, "setting_id")} & priced)
        if both:
            _bad("infeasible", f"config {both[0][0]} is both priced and infeasible at setting {both[0][1]}")
        return tables

    def _price_tables(self) -> tuple[dict[str, pa.Table | ds.Dataset], set[tuple[str, str]]]:
        """The price and cost tables of the run, keyed and in the tables' column order, each
        config's rows checked here (complete and unique), so the store can append them as they
        are: held in memory, or written into `spool` and handed over as datasets. And the (config,
        setting) pairs priced."""
        setting_ids = {s["setting_id"] for s in self.settings}
        n_masks = 1 << len(self.switches)
        out = KeyedPrices(STAGED_PRICES, None if self.spool is None else Path(tempfile.mkdtemp(prefix="staged-", dir=self.spool)))
        priced: set[tuple[str, str]] = set()
        for config_hash, tables in sorted(self.prices.items()):
            parts = {}
            for part, columns in _PRICE_PARTS:
                table = tables.get(part) if isinstance(tables, Mapping) else getattr(tables, part)
                where = f"prices[{config_hash!r}].{part}"
                if not isinstance(table, pa.Table):
                    _bad(where, f"must be a pyarrow Table, got {type(table).__name__}")
                lacking = [c for c in columns if c not in table.column_names]
                if lacking:
                    _bad(where, f"lacks column(s) {lacking}; needs {list(columns)}")
                parts[part] = table
            _check_prices(f"prices[{config_hash!r}]", parts["layer_prices"], parts["full_prices"], setting_ids, n_masks)
            _check_costs(f"prices[{config_hash!r}].switch_costs", parts["switch_costs"], parts["full_prices"], n_masks)
            ends = sorted(_column(self.end_prices.get(config_hash, ()), "setting_id"))
            settings_priced = sorted(set(parts["full_prices"]["setting_id"].to_pylist()))
            if ends and ends != settings_priced:
                _bad(f"end_prices[{config_hash!r}]", "must price the ends once at each setting the config is priced at")
            _check_loss_prices(f"loss_prices[{config_hash!r}]", _arrow(self.loss_prices.get(config_hash, ())), settings_priced,
                               {row["loss"] for row in self.losses})
            priced_at = _distinct(parts["full_prices"], ("kind", "setting_id"))
            priced |= {(config_hash, setting_id) for setting_id in settings_priced}
            costs = _arrow(self.op_costs.get(config_hash, ()))
            if costs.num_rows and (_count_distinct(costs, ("kind", "setting_id", "op")) != costs.num_rows
                                   or _distinct(costs, ("kind", "setting_id")) != priced_at):  # fmt: skip
                _bad(f"op_costs[{config_hash!r}]", "must cost each op once for each kind and setting the config is priced at")
            _check_op_prices(f"op_prices[{config_hash!r}]", _arrow(self.op_prices.get(config_hash, ())), {k for k, _ in priced_at}, setting_ids)
            for part, _ in _PRICE_PARTS:
                table, n = parts[part], parts[part].num_rows
                keys = {
                    "config_hash": _constant(config_hash, n),
                    **{k: _constant(v, n) for k, v in self.spec_key.items()},
                    "records_version": _constant(self.records_version, n),
                }
                schema = STAGED_PRICES[part]
                columns = [
                    keys[f.name] if f.name in keys
                    else pa.nulls(n, f.type) if f.name in OPTIONAL_PRICE_COLUMNS and f.name not in table.column_names
                    else table.column(f.name).cast(f.type)
                    for f in schema
                ]
                out.add(part, pa.table(columns, schema=schema))
        return out.tables(), priced


def _check_op_prices(where: str, rows: pa.Table, kinds: set[str], setting_ids: set[str]) -> None:
    """Each op's share once per kind priced and setting of the run, every kind at every setting
    where any is, the bytes finite and not negative."""
    if not rows.num_rows:
        return
    if _count_distinct(rows, ("kind", "setting_id", "part", "op")) != rows.num_rows:
        _bad(where, "must state each (kind, setting, part, op) once")
    if set(_column(rows, "kind")) != kinds:
        _bad(where, f"must state the kinds priced, {sorted(kinds)}")
    settings = set(_column(rows, "setting_id"))
    unknown = sorted(settings - setting_ids)
    if unknown:
        _bad(where, f"setting_id(s) {unknown[:3]} are not among the run's settings")
    if rows.num_rows != len(kinds) * len(settings) * _count_distinct(rows, ("part", "op")):
        _bad(where, "must state every kind at every setting and (part, op) it states any at")
    if not _finite_not_negative(rows, ("kept_bytes", "full_bytes")):
        _bad(where, "bytes must be finite and not negative")


def _check_loss_prices(where: str, rows: pa.Table, setting_ids: list[str], losses: set[str]) -> None:
    """The logits end once per setting priced and loss kernel (those of the night's `losses`
    where it states them), the bytes finite and not negative."""
    if not rows.num_rows:
        return
    stated = losses or set(_column(rows, "loss"))
    keys = _distinct(rows, ("setting_id", "loss"))
    if len(keys) != rows.num_rows or keys != {(s, loss) for s in setting_ids for loss in stated}:
        _bad(where, f"must price each loss kernel {sorted(stated)} once at each setting the config is priced at")
    if not _finite_not_negative(rows, ("kept_bytes", "working_bytes")):
        _bad(where, "bytes must be finite and not negative")


def switch_set_rows(switches: Sequence[str]) -> list[dict[str, Any]]:
    """One row per mask: a boolean per switch (bit i = switch i recomputed), count, list, name."""
    rows = []
    everything = (1 << len(switches)) - 1
    for mask in range(everything + 1):
        chosen = [s for i, s in enumerate(switches) if mask >> i & 1]
        name = "none" if mask == 0 else "all" if mask == everything else ",".join(chosen)
        rows.append(
            {
                "mask": mask,
                **{s: bool(mask >> i & 1) for i, s in enumerate(switches)},
                "n_recomputed": len(chosen),
                "switches": chosen,
                "name": name,
            }
        )
    return rows


def _constant(value: str, n: int) -> pa.DictionaryArray:
    """`value` n times, dictionary-encoded: 4 bytes a row instead of the string's length."""
    return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()).fill_null(0), pa.array([value], pa.string()))


def _canonical(mapping: Mapping[str, Any]) -> str:
    """JSON text that is the same for equal mappings, so a re-stored run compares equal.

    A config may hold JSON's non-standard Infinity (nemotron_h's time_step_limit), which
    DuckDB's JSON cannot: it is stored as the string "Infinity" (or "-Infinity")."""
    return json.dumps(_finite(mapping), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _arrow(rows: Rows) -> pa.Table:
    """One config's rows as an Arrow table, which the checks read column by column: a first night
    holds millions of op_costs rows, and turning each into a Python mapping took seconds."""
    return rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))


def _column(rows: Rows, name: str) -> list[Any]:
    """The values of one field of one config's rows (a short table's: a setting per row)."""
    return _arrow(rows).column(name).to_pylist() if len(rows) else []


def _distinct(rows: pa.Table, columns: Sequence[str]) -> set[tuple[Any, ...]]:
    """The distinct values of `columns` together, as tuples (for key sets that are small)."""
    keys = rows.group_by(list(columns)).aggregate([])
    return set(zip(*(keys.column(c).to_pylist() for c in columns)))


def _count_distinct(rows: pa.Table, columns: Sequence[str]) -> int:
    return rows.group_by(list(columns)).aggregate([]).num_rows


def _finite_not_negative(rows: pa.Table, columns: Sequence[str]) -> bool:
    return all(pc.all(pc.and_(pc.is_finite(rows[c]), pc.greater_equal(rows[c], 0))).as_py() is not False for c in columns)


def _keyed(rows: pa.Table, keys: Mapping[str, str]) -> pa.Table:
    """`rows` after a column per key, each its one value dictionary-encoded."""
    columns = {k: _constant(v, rows.num_rows) for k, v in keys.items()}
    return pa.table({**columns, **{c: rows.column(c) for c in rows.column_names}})


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> pa.Table:
    """An Arrow table with these columns even when there are no rows (types come from SQL)."""
    if rows:
        return pa.Table.from_pylist(rows)
    return pa.table({c: pa.array([], pa.null()) for c in columns})


def _check_prices(where: str, layer: pa.Table, full: pa.Table, setting_ids: set[str], n_masks: int) -> None:
    """One config's prices: every (kind, setting) priced at every switch set exactly once, the full
    recompute once per (kind, setting), the same kinds and settings in both, settings of the run."""
    kinds = pc.unique(layer["kind"])
    settings = pc.unique(layer["setting_id"])
    unknown = sorted(set(settings.to_pylist()) - setting_ids)
    if unknown:
        _bad(f"{where}.layer_prices", f"setting_id(s) {unknown[:3]} are not among the run's settings")
    masks = layer["mask"].to_numpy().astype(np.int64)
    if masks.size and (masks.min() < 0 or masks.max() >= n_masks):
        _bad(f"{where}.layer_prices", f"masks must be in 0..{n_masks - 1}")
    key = (
        pc.index_in(layer["kind"], value_set=kinds).to_numpy().astype(np.int64) * len(settings)
        + pc.index_in(layer["setting_id"], value_set=settings).to_numpy().astype(np.int64)
    ) * n_masks + masks
    expected = len(kinds) * len(settings) * n_masks
    if layer.num_rows != expected or np.unique(key).size != expected:
        _bad(
            f"{where}.layer_prices",
            f"{layer.num_rows} rows, {np.unique(key).size} distinct (kind, setting, mask); a complete table "
            f"has {len(kinds)} kinds x {len(settings)} settings x {n_masks} masks = {expected}",
        )
    pairs = _distinct(full, ("kind", "setting_id"))
    if full.num_rows != len(pairs) or pairs != {(k, t) for k in kinds.to_pylist() for t in settings.to_pylist()}:
        _bad(f"{where}.full_prices", "must price each (kind, setting) of layer_prices exactly once")


def _check_costs(where: str, costs: pa.Table, full: pa.Table, n_masks: int) -> None:
    """One config's switch_costs: a row per (kind, setting) of full_prices and point (mask
    0..n-1, or -1 for full recompute), each once."""
    kinds, settings = pc.unique(full["kind"]), pc.unique(full["setting_id"])
    masks = costs["mask"].to_numpy().astype(np.int64)
    if masks.size and (masks.min() < -1 or masks.max() >= n_masks):
        _bad(where, f"masks must be in -1..{n_masks - 1}")
    kind_idx = pc.index_in(costs["kind"], value_set=kinds).to_numpy(zero_copy_only=False)
    setting_idx = pc.index_in(costs["setting_id"], value_set=settings).to_numpy(zero_copy_only=False)
    if np.isnan(kind_idx.astype(float)).any() or np.isnan(setting_idx.astype(float)).any():
        _bad(where, "has a kind or setting that full_prices has not")
    key = (kind_idx.astype(np.int64) * len(settings) + setting_idx.astype(np.int64)) * (n_masks + 1) + masks + 1
    expected = full.num_rows * (n_masks + 1)
    if costs.num_rows != expected or np.unique(key).size != expected:
        _bad(where, f"{costs.num_rows} rows, {np.unique(key).size} distinct (kind, setting, mask); needs one per "
                    f"(kind, setting) of full_prices and mask -1..{n_masks - 1}: {expected}")


def _check_hub_params(where: str, repo: Mapping[str, Any]) -> None:
    """The Hub's counts of a repo row: a total and per-dtype counts that are whole numbers not
    below 0 (or None), and config_parts a list of names (or None)."""
    total, by_dtype, parts = repo.get("hub_params"), repo.get("hub_params_by_dtype"), repo.get("config_parts")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        _bad(f"{where}.hub_params", f"must be a whole number not below 0, got {total!r}")
    if by_dtype is not None and not (
        isinstance(by_dtype, Mapping)
        and all(isinstance(k, str) and k and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in by_dtype.items())
    ):
        _bad(f"{where}.hub_params_by_dtype", f"must map dtype names to whole numbers not below 0, got {by_dtype!r}")
    if parts is not None and (isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence)
                              or not all(isinstance(p, str) and p for p in parts)):  # fmt: skip
        _bad(f"{where}.config_parts", f"must be a list of names, got {parts!r}")


def _with_column(table: pa.Table, column: str, values: list[Any], type_: pa.DataType) -> pa.Table:
    """`table` with `column` holding `values` (one a row) as `type_`: a map's (key, value) pairs
    cannot be inferred from Python values, which would make a list of structs (or fail)."""
    if table.num_rows == 0:
        return table
    field = pa.field(column, type_)
    array = pa.array(values, type_)
    if column in table.column_names:
        return table.set_column(table.column_names.index(column), field, array)
    return table.append_column(field, array)


def _check_rows(where: str, rows: Rows, allowed: Sequence[str], required: Sequence[str]) -> None:
    """`_check_row` for each of one config's rows; an Arrow table's checked by column, naming the
    first row that leaves a required field null or empty."""
    if not isinstance(rows, pa.Table):
        for i, row in enumerate(rows):
            _check_row(f"{where}[{i}]", row, allowed, required)
        return
    if not rows.num_rows:
        return
    unknown = sorted(set(rows.column_names) - set(allowed))
    if unknown:
        _bad(f"{where}[0]", f"unknown field(s) {unknown}; allowed: {list(allowed)}")
    for key in required:
        if key not in rows.column_names:
            _bad(f"{where}[0].{key}", "is required")
        column = rows[key]
        blank = pc.is_null(column)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            blank = pc.or_kleene(blank, pc.equal(column, ""))  # null or empty
        first = pc.index(blank, True).as_py()
        if first >= 0:
            _bad(f"{where}[{first}].{key}", "is required")


def _check_row(where: str, row: Any, allowed: Sequence[str], required: Sequence[str]) -> None:
    if not isinstance(row, Mapping):
        _bad(where, f"must be a mapping, got {type(row).__name__}")
    unknown = sorted(set(row) - set(allowed))
    if unknown:
        _bad(where, f"unknown field(s) {unknown}; allowed: {list(allowed)}")
    for key in required:
        if row.get(key) in (None, ""):
            _bad(f"{where}.{key}", "is required")


def _bad(where: str, what: str) -> None:
    raise StoreError("bad_run", f"{where}: {what}")
