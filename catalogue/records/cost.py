"""Recompute cost per (kind, setting, switch set): forward FLOPs and bytes moved of the ops a
set recomputes, and an estimated time on named accelerators (docs/planning.md).

The per-op formulas are data (`catalogue/records/costs.yaml`), written in the records'
expression language over a layer's names (catalogue/records/names.py) plus the kind's parameter
groups (`p_attention`, ...), so a cost scales with s, b, tp and cp as bytes do. Which ops a set
recomputes is the records' own rule: the ops and parts whose saves the set drops
(`Records.kept`); full recompute re-runs every op once. The accelerators' peaks are
`catalogue/records/accelerators.yaml`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.datafile import read_yaml, version_of
from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.records.exprloader import ExprLoader
from speccat.catalogue.records.names import LAYER_NAMES, PARAM_GROUPS, bind
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import kinds_of
from speccat.catalogue.records.settings import Grid

COSTS_PATH = Path(__file__).with_name("costs.yaml")
ACCELERATORS_PATH = Path(__file__).with_name("accelerators.yaml")
PARAM_NAMES = tuple(f"p_{group}" for group in PARAM_GROUPS)  # the kind's parameter groups, beside a layer's names


class CostError(ReasonError):
    """A costs or accelerators file, or a layer, the cost arithmetic refuses."""

    group = "records"


@dataclass(frozen=True)
class Costs:
    ops: Mapping[str, tuple[Expr, Expr]]  # op or part -> (flops, bytes)
    step_factor: float
    version: str


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float
    bandwidth: float
    memory: float
    node: int  # GPUs of one node
    host_link: float  # bytes/s to or from host memory, one direction
    default: bool = False  # the one estimated on when none is named

    def seconds(self, flops: Any, moved: Any) -> Any:
        """max(flops / peak, bytes / bandwidth), element for element."""
        return np.maximum(np.asarray(flops, dtype=float) / self.peak_flops, np.asarray(moved, dtype=float) / self.bandwidth)


class _Loader(ExprLoader):
    error = CostError


def load_costs(records: Records, path: str | Path | None = None) -> Costs:
    """Read `costs.yaml`: one (flops, bytes) pair for every op and part of `records`."""
    path = Path(path) if path is not None else COSTS_PATH
    loader = _Loader(path.name)
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("step_factor", "ops"), ("step_factor", "ops"))
    wanted = (*records.ops, *records.parts)
    body = loader.mapping("ops", top["ops"], wanted, wanted, unknown="unknown_op", missing="missing_op")
    known = frozenset(LAYER_NAMES) | frozenset(records.derived) | frozenset(records.defaults) | frozenset(PARAM_NAMES)
    ops = {}
    for name in wanted:
        entry = loader.mapping(f"ops.{name}", body[name], ("flops", "bytes"), ("flops", "bytes"))
        ops[name] = (loader.expr(f"ops.{name}.flops", entry["flops"], known), loader.expr(f"ops.{name}.bytes", entry["bytes"], known))
    step = top["step_factor"]
    if not isinstance(step, (int, float)) or isinstance(step, bool) or step < 1:
        raise loader.fail("bad_value", "step_factor", f"must be a number >= 1, got {step!r}")
    return Costs(ops, float(step), version_of(data))


def stored_version(records: Records, costs: Costs, ends: Any) -> str:
    """The version stored prices and costs are keyed by (`records_version`): the records, the
    costs of their ops and the ends' prices (ends.yaml, an ends.Ends) together, so a change to
    any of them prices every config again. The ends' version is hashed under the key "head",
    the file's name when the catalogue's versions were first stored: renaming the key would
    change every records_version."""
    return version_of({"records": records.version, "costs": costs.version, "head": ends.version})


def load_accelerators(path: str | Path | None = None) -> dict[str, Accelerator]:
    """Read `accelerators.yaml`: name -> Accelerator, the file's `default` flagged."""
    path = Path(path) if path is not None else ACCELERATORS_PATH
    loader = _Loader(path.name)
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("default", "accelerators"), ("default", "accelerators"))
    if top["default"] not in top["accelerators"]:
        raise loader.fail("bad_value", "default", f"names no accelerator of the file: {top['default']!r}")
    out = {}
    for name, body in top["accelerators"].items():
        fields = ("peak_flops", "bandwidth", "memory", "node", "host_link")
        body = loader.mapping(f"accelerators.{name}", body, fields, fields)
        values = [body[k] for k in fields]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values) or not isinstance(body["node"], int):
            raise loader.fail("bad_value", f"accelerators.{name}", "peak_flops, bandwidth, memory, host_link must be > 0 and node a positive integer")
        out[name] = Accelerator(name, float(values[0]), float(values[1]), float(values[2]), int(values[3]), float(values[4]), name == top["default"])
    return out


def accelerator_rows(accelerators: Mapping[str, Accelerator]) -> list[dict[str, Any]]:
    """The catalogue's `accelerators` rows (docs/catalogue.md), one per named accelerator."""
    return [
        {"accelerator": a.name, "default_accelerator": a.default, "peak_flops_per_s": a.peak_flops,
         "bandwidth_bytes_per_s": a.bandwidth, "memory_bytes": a.memory, "node_gpus": a.node, "host_link_bytes_per_s": a.host_link}
        for a in accelerators.values()
    ]  # fmt: skip


def recomputed(records: Records, ops: tuple[str, ...]) -> np.ndarray:
    """[mask, op]: whether switch set `mask` recomputes op (or part) `op`: its saves are dropped."""
    out = np.zeros((records.n_masks, len(ops)), dtype=bool)
    for mask in range(records.n_masks):
        kept = records.kept(mask)
        for j, op in enumerate(ops):
            record = records.ops.get(op) or records.parts[op]
            out[mask, j] = record.switch is not None and op not in kept
    return out


def switch_op_rows(records: Records, costs: Costs) -> list[dict[str, Any]]:
    """The catalogue's `switch_ops` rows: (mask, op) for every op a switch set recomputes, and
    (-1, op) for every op: full recompute re-runs them all."""
    ops = tuple(costs.ops)
    table = recomputed(records, ops)
    rows = [{"mask": int(mask), "op": ops[j]} for mask, j in zip(*np.nonzero(table))]
    return rows + [{"mask": -1, "op": op} for op in ops]


@dataclass(frozen=True)
class OpCosts:
    """Per (kind, setting, op): forward FLOPs and bytes moved of re-running that op."""

    kinds: tuple[str, ...]
    setting_ids: tuple[str, ...]
    ops: tuple[str, ...]
    flops: np.ndarray  # [kind, setting, op]
    moved: np.ndarray  # [kind, setting, op], bytes

    def masks(self, records: Records) -> tuple[np.ndarray, np.ndarray]:
        """[kind, setting, mask]: FLOPs and bytes a switch set recomputes."""
        r = recomputed(records, self.ops).astype(float)
        return self.flops @ r.T, self.moved @ r.T

    def forward(self) -> tuple[np.ndarray, np.ndarray]:
        """[kind, setting]: the layer's whole forward (full recompute)."""
        return self.flops.sum(axis=2), self.moved.sum(axis=2)

    def seconds(self, accelerator: Accelerator, records: Records | None = None) -> np.ndarray:
        """Estimated seconds per op ([kind, setting, op]); with `records`, per mask ([kind, setting, mask])."""
        per_op = accelerator.seconds(self.flops, self.moved)
        if records is None:
            return per_op
        return per_op @ recomputed(records, self.ops).astype(float).T

    def rows(self, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        """The catalogue's `op_costs` rows: per (kind, setting, op), settings in `skip` left out."""
        return [
            {"kind": kind, "setting_id": sid, "op": op, "recompute_flops": float(self.flops[k, i, j]), "recompute_bytes": float(self.moved[k, i, j])}
            for k, kind in enumerate(self.kinds)
            for i, sid in enumerate(self.setting_ids) if sid not in skip
            for j, op in enumerate(self.ops)
        ]  # fmt: skip


def op_costs(spec: Mapping, records: Records, grid: Grid, costs: Costs) -> OpCosts:
    """Every op's recompute cost for every kind of `spec` at every setting of `grid`."""
    kvs = kinds_of(spec)
    kinds = tuple(kv.kind for kv in kvs)
    ops = tuple(costs.ops)
    flops = np.zeros((len(kinds), len(grid.settings), len(ops)))
    moved = np.zeros_like(flops)
    for k, (kind, kv) in enumerate(zip(kinds, kvs)):
        if kv.params is None:
            raise CostError("bad_value", f"params.kinds.{kind}: the spec states no parameters for kind {kind!r}")
        for i, setting in enumerate(grid.settings):
            names = bind(kv, setting, grid.dtype_bytes, records)
            names.update(kv.params)
            for j, op in enumerate(ops):
                f, m = costs.ops[op]
                try:
                    flops[k, i, j], moved[k, i, j] = float(f(names)), float(m(names))
                except ExprError as err:
                    raise CostError("bad_value", f"kind {kind!r}, setting {setting['setting_id']}, op {op}: {err}") from None
    if not (np.isfinite(flops).all() and np.isfinite(moved).all() and (flops >= 0).all() and (moved >= 0).all()):
        raise CostError("bad_value", "a cost is negative or not finite")
    return OpCosts(kinds, tuple(s["setting_id"] for s in grid.settings), ops, flops, moved)
