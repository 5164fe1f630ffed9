"""Model states per rank: weights, gradients and optimizer states (docs/planning.md).

The bytes per parameter of each state, how a ZeRO stage partitions them over data-parallel
ranks and how each parameter group divides among model-parallel ranks are data, in
`catalogue/records/states.yaml`; this module reads them and hands them to the catalogue as the
`state_sharding` rows, from which the planner's SQL (sql/macros/rank_stages.sql) works out what
each rank of a layout holds.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from speccat.catalogue.errors import ReasonError
from speccat.catalogue.datafile import read_yaml, version_of
from speccat.catalogue.records.expr import Expr
from speccat.catalogue.records.exprloader import ExprLoader

STATES_PATH = Path(__file__).with_name("states.yaml")
STATES = ("weight", "grad", "optimizer")
# the whole model's groups: the word embedding, the output head, the final norm, and the parameters
# the text path reads outside its layers besides those, before the stack and after it (a spec
# from before the census stated these two may lack them: 0)
MODEL_GROUPS = ("embedding", "output", "final_norm", "embedding_extra", "head_extra")
KIND_GROUPS = ("attention", "ffn_dense", "ffn_shared", "ffn_router", "ffn_routed", "norm", "other")
LAYOUT_NAMES = frozenset({"t", "cp", "dp", "ep", "etp"})


class StatesError(ReasonError):
    """A states file, layout or spec the model-state arithmetic refuses."""

    group = "records"


@dataclass(frozen=True)
class Group:
    model: Expr
    data: Expr


@dataclass(frozen=True)
class States:
    recipes: Mapping[str, Mapping[str, float]]
    default_recipe: str
    zero: Mapping[int, frozenset[str]]
    groups: Mapping[str, Group]
    active: Mapping[str, Expr]
    version: str = field(default="")
    sources: Mapping[str, str] = field(default_factory=dict)  # recipe -> where its bytes per parameter come from

    @functools.cached_property
    def powers(self) -> Mapping[str, Mapping[str, Mapping[str, int]]]:
        """group -> {"model", "data"} -> layout size -> its power in that divisor (`_powers`),
        read once: the form both the planner and the catalogue's SQL evaluate."""
        return {
            name: {side: _powers(getattr(group, side), f"groups.{name}.{side}") for side in ("model", "data")}
            for name, group in self.groups.items()
        }

    def bytes_per_param(self, recipe: str | None = None) -> Mapping[str, float]:
        name = recipe or self.default_recipe
        if name not in self.recipes:
            raise StatesError("bad_value", f"unknown recipe {name!r}; recipes: {', '.join(self.recipes)}")
        return self.recipes[name]


class _StatesLoader(ExprLoader):
    error = StatesError
    list_known = True  # the layout sizes a sharding reads

    def load(self, data: Any) -> States:
        top = self.mapping("", data, ("recipes", "default_recipe", "zero", "groups", "active"), ("recipes", "default_recipe", "zero", "groups"))
        recipes, sources = {}, {}
        for name, body in top["recipes"].items():
            body = dict(self.mapping(f"recipes.{name}", body, (*STATES, "source"), (*STATES, "source")))
            source = body.pop("source")
            if not isinstance(source, str) or not source.strip():
                raise self.fail("bad_value", f"recipes.{name}.source", "every recipe names its source in words")
            sources[name] = source
            for state, value in body.items():
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                    raise self.fail("bad_value", f"recipes.{name}.{state}", f"bytes per parameter must be a number >= 0, got {value!r}")
            recipes[name] = {state: float(body[state]) for state in STATES}
        if top["default_recipe"] not in recipes:
            raise self.fail("bad_value", "default_recipe", f"{top['default_recipe']!r} is no recipe")
        zero = {}
        for stage, sharded in top["zero"].items():
            if not isinstance(sharded, list) or set(sharded) - set(STATES):
                raise self.fail("bad_value", f"zero.{stage}", f"must list states among {STATES}")
            zero[int(stage)] = frozenset(sharded)
        groups = {}
        for name in (*MODEL_GROUPS, *KIND_GROUPS):
            if name not in top["groups"]:
                raise self.fail("missing_key", f"groups.{name}", "every parameter group needs its sharding")
        for name, body in top["groups"].items():
            if name not in (*MODEL_GROUPS, *KIND_GROUPS):
                raise self.fail("unknown_key", f"groups.{name}", f"groups: {', '.join((*MODEL_GROUPS, *KIND_GROUPS))}")
            body = self.mapping(f"groups.{name}", body, ("model", "data"), ("model", "data"))
            groups[name] = Group(self.expr(f"groups.{name}.model", body["model"], LAYOUT_NAMES), self.expr(f"groups.{name}.data", body["data"], LAYOUT_NAMES))
        active = {}
        for name, text in (top.get("active") or {}).items():
            if name not in KIND_GROUPS:
                raise self.fail("unknown_key", f"active.{name}", f"kind groups: {', '.join(KIND_GROUPS)}")
            active[name] = self.expr(f"active.{name}", text, frozenset({"n_chosen_exp", "n_exp"}))
        return States(recipes, top["default_recipe"], zero, groups, active, version_of(data), sources)


def load_states(path: str | Path | None = None) -> States:
    """Read `catalogue/records/states.yaml` (or `path`)."""
    path = Path(path) if path is not None else STATES_PATH
    loader = _StatesLoader(path.name)
    return loader.load(read_yaml(path, lambda reason, what: loader.fail(reason, "", what)))


def _params(spec: Mapping) -> Mapping:
    params = spec.get("params")
    if not isinstance(params, Mapping) or "kinds" not in params:
        raise StatesError("bad_value", "the spec states no params (embedding, output, final_norm, embedding_extra, head_extra, kinds)")
    return params


# The columns of the catalogue's `state_sharding` rows, after (recipe, group, state).
SHARDING_NAMES = tuple(sorted(LAYOUT_NAMES))
_PROBE = {"t": 3.0, "cp": 5.0, "dp": 7.0, "ep": 11.0, "etp": 13.0}  # distinct primes: a check point


def _powers(expr: Expr, key: str) -> dict[str, int]:
    """`expr` as a product of layout sizes to integer powers (t·cp, dp·cp·t/(ep·etp)): the form
    the catalogue's SQL evaluates. Each power is read with every other size at 1; the product
    is then checked against `expr` at a point of distinct primes."""
    ones = dict.fromkeys(LAYOUT_NAMES, 1.0)
    doubled = [float(expr({**ones, name: 2.0})) for name in SHARDING_NAMES]
    powers = {name: round(math.log2(v)) if v > 0 else 0 for name, v in zip(SHARDING_NAMES, doubled)}
    product = math.prod(_PROBE[name] ** p for name, p in powers.items())
    if min(doubled) <= 0 or not math.isclose(float(expr(_PROBE)), product, rel_tol=1e-12):
        raise StatesError("bad_value", f"{key}: {expr.source!r} must be a product of layout sizes ({', '.join(SHARDING_NAMES)}) and their inverses")
    return powers


def state_sharding_rows(states: States) -> list[dict[str, Any]]:
    """The catalogue's `state_sharding` rows (docs/catalogue.md): per recipe (and whether it is
    the default), parameter group and state, the bytes per parameter, the lowest ZeRO stage
    that partitions the state over the group's data-parallel ranks (None: none does), and the
    powers of each layout size in the group's model and data divisors: states.yaml as rows a
    view can join."""
    divisors = states.powers
    rows = []
    for recipe, per_param in states.recipes.items():
        for name in states.groups:
            for state in STATES:
                stages = sorted(stage for stage, sharded in states.zero.items() if state in sharded)
                if stages and stages != [stage for stage in sorted(states.zero) if stage >= stages[0]]:
                    raise StatesError("bad_value", f"zero: {state} must stay partitioned from the first stage that partitions it")
                row = {"recipe": recipe, "default_recipe": recipe == states.default_recipe, "group": name, "state": state,
                       "bytes_per_param": per_param[state], "sharded_from": stages[0] if stages else None}  # fmt: skip
                for side in ("model", "data"):
                    row.update({f"{side}_{n}": divisors[name][side][n] for n in SHARDING_NAMES})
                rows.append(row)
    return rows


def total_params(spec: Mapping) -> float:
    """Parameters of the whole model: its whole-model groups (MODEL_GROUPS) and every layer."""
    params = _params(spec)
    counts: dict[str, int] = {}
    for group in spec["layers"]:
        counts[group["kind"]] = counts.get(group["kind"], 0) + group["count"]
    layers = sum(n * sum(float(params["kinds"][k].get(g, 0)) for g in KIND_GROUPS) for k, n in counts.items())
    return sum(float(params.get(group, 0)) for group in MODEL_GROUPS) + layers


def active_params(spec: Mapping, states: States) -> float:
    """Parameters one token runs through: routed experts count their share (states.yaml
    `active`), every other parameter whole; the embedding counts as one lookup of its table,
    as it is usually stated (the whole table)."""
    params = _params(spec)
    names = {"n_exp": float(spec.get("num_experts", 1) or 1), "n_chosen_exp": float(spec.get("num_experts_per_tok", 1) or 1)}
    counts: dict[str, int] = {}
    for group in spec["layers"]:
        counts[group["kind"]] = counts.get(group["kind"], 0) + group["count"]
    total = sum(float(params.get(group, 0)) for group in MODEL_GROUPS)
    for kind, n in counts.items():
        for name in KIND_GROUPS:
            value = float(params["kinds"][kind].get(name, 0))
            if value and name in states.active:
                value *= states.active[name](names)
            total += n * value
    return total
