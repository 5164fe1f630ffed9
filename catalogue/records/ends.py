"""Pricing the model's ends: the embedding's ids, the final norm, and the logits with the loss
kernel a run puts after the head (eager, chunked, fused linear), what each keeps and the most
it holds at once beyond that (`catalogue/records/ends.yaml`, docs/planning.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speccat.catalogue.errors import ReasonError
from speccat.catalogue.datafile import read_yaml, version_of
from speccat.catalogue.records.expr import Expr, ExprError
from speccat.catalogue.records.exprloader import ExprLoader
from speccat.catalogue.records.names import LAYER_NAMES, KindValues, bind, kind_values
from speccat.catalogue.records.oprecords import Records
from speccat.catalogue.records.priced import stack_counts
from speccat.catalogue.vocabulary import END_PARTS, LOGIT_FACTS

ENDS_PATH = Path(__file__).with_name("ends.yaml")
LOSS_PART = "logits"  # the end a loss kernel prices: the head's input, the logits and the loss
BODY_PARTS = tuple(part for part in END_PARTS if part != LOSS_PART)  # the ends priced whatever the loss
LOSS_FIELDS = ("source", "chunk", "keeps", "working")


class EndsError(ReasonError):
    group = "records"


@dataclass(frozen=True)
class Loss:
    """One loss kernel of `ends.yaml`: what it keeps (the `logits` end) and its working set."""

    name: str
    keeps: Expr
    working: Expr
    chunk: float | None  # tokens per chunk, a name its expressions read; None: it states none
    source: str


@dataclass(frozen=True)
class Ends:
    """`ends.yaml` read: one price expression per end but the loss's, and the loss kernels."""

    parts: Mapping[str, Expr]  # BODY_PARTS
    transform: Expr  # what a transform before the head keeps, under every loss kernel
    losses: Mapping[str, Loss]
    default_loss: str  # the model's own loss, which the census measures
    unmeasured: Mapping[str, float]  # the logit facts of a spec that states no ends
    version: str

    def rows(self) -> list[dict[str, Any]]:
        """The catalogue's `losses` rows (docs/catalogue.md)."""
        return [{"loss": loss.name, "chunk_tokens": loss.chunk, "is_default": loss.name == self.default_loss, "source": loss.source}
                for loss in self.losses.values()]


def load_ends(records: Records, path: str | Path | None = None) -> Ends:
    """Read `ends.yaml`: one expression per end, over the names a layer of `records` reads."""
    path = Path(path) if path is not None else ENDS_PATH
    loader = ExprLoader(path.name)
    loader.error = EndsError
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    fields = ("parts", "transform", "unmeasured", "default_loss", "losses")
    top = loader.mapping("", data, fields, fields)
    unmeasured = loader.mapping("unmeasured", top["unmeasured"], LOGIT_FACTS, LOGIT_FACTS)
    for fact, value in unmeasured.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise loader.fail("bad_value", f"unmeasured.{fact}", f"must be a non-negative integer, got {value!r}")
    body = loader.mapping("parts", top["parts"], BODY_PARTS, BODY_PARTS)
    known = frozenset(LAYER_NAMES) | frozenset(records.derived) | frozenset(records.defaults) | {"V", *LOGIT_FACTS}
    parts = {name: loader.expr(f"parts.{name}", body[name], known) for name in BODY_PARTS}
    transform = loader.expr("transform", top["transform"], known)
    losses = {}
    if not isinstance(top["losses"], Mapping) or not top["losses"]:
        raise loader.fail("bad_value", "losses", "must map each loss kernel's name to its fields")
    for name, entry in top["losses"].items():
        where = f"losses.{name}"
        entry = loader.mapping(where, entry, LOSS_FIELDS, ("source", "keeps", "working"))
        chunk = entry.get("chunk")
        if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1):
            raise loader.fail("bad_value", f"{where}.chunk", f"must be a whole number of tokens, got {chunk!r}")
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise loader.fail("bad_value", f"{where}.source", "must say where the kernel's behaviour is documented")
        names = known | ({"chunk"} if chunk is not None else set())
        losses[name] = Loss(str(name), loader.expr(f"{where}.keeps", entry["keeps"], names),
                            loader.expr(f"{where}.working", entry["working"], names),
                            None if chunk is None else float(chunk), entry["source"])
    if top["default_loss"] not in losses:
        raise loader.fail("bad_value", "default_loss", f"{top['default_loss']!r} is none of the losses {sorted(losses)}")
    return Ends(parts, transform, losses, top["default_loss"], {fact: float(v) for fact, v in unmeasured.items()}, version_of(data))


def end_prices(spec: Mapping, records: Records, grid, ends: Ends, skip: frozenset[str] = frozenset()) -> list[dict]:
    """The catalogue's `end_prices` rows of `spec`: per setting of `grid` (but those in `skip`,
    where the model cannot be laid out), the bytes each end keeps (one rank, one micro-batch),
    the logits under the model's own loss."""
    kv = _first_kind(spec)
    return [
        {"setting_id": setting["setting_id"], **_priced(spec, kv, records, setting, grid.dtype_bytes, ends)}
        for setting in grid.settings
        if setting["setting_id"] not in skip
    ]


def loss_prices(spec: Mapping, records: Records, grid, ends: Ends, skip: frozenset[str] = frozenset()) -> list[dict]:
    """The catalogue's `loss_prices` rows of `spec`: per setting of `grid` (but those in `skip`)
    and loss kernel, what the logits end keeps under it and its working set (one rank, one
    micro-batch)."""
    kv = _first_kind(spec)
    rows = []
    for setting in grid.settings:
        if setting["setting_id"] in skip:
            continue
        names = _names(spec, kv, records, setting, grid.dtype_bytes, ends)
        for loss in ends.losses.values():
            kept, working = _losses(loss, ends, names)
            rows.append({"setting_id": setting["setting_id"], "loss": loss.name, "kept_bytes": kept, "working_bytes": working})
    return rows


def price_ends_at(spec: Mapping, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], ends: Ends) -> dict[str, float]:
    """Bytes each end keeps at `setting` (one rank, one micro-batch), read with the first kind's
    names, the logits under the model's own loss (what the census measures)."""
    return _priced(spec, _first_kind(spec), records, setting, dtype_bytes, ends)


def _first_kind(spec: Mapping) -> KindValues:
    return kind_values(spec, next(iter(stack_counts(spec))))


def _names(spec: Mapping, kv: KindValues, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], ends: Ends) -> Any:
    names: Any = bind(kv, setting, dtype_bytes, records)
    names["V"] = float(spec["vocab_size"])
    measured = spec.get("ends")
    names.update({fact: float(measured[fact]) for fact in LOGIT_FACTS} if measured else ends.unmeasured)
    return names


def _losses(loss: Loss, ends: Ends, names: Any) -> tuple[float, float]:
    """(what the logits end keeps under `loss`: the kernel's own and a transform before the head; the
    kernel's working set) with `names` bound."""
    if loss.chunk is not None:
        names["chunk"] = loss.chunk
    try:
        return float(loss.keeps(names)) + float(ends.transform(names)), float(loss.working(names))
    except ExprError as err:
        raise EndsError("bad_value", f"ends: losses.{loss.name}: {err}") from None
    finally:
        names.pop("chunk", None)


def _priced(spec: Mapping, kv: KindValues, records: Records, setting: Mapping, dtype_bytes: Mapping[str, int], ends: Ends) -> dict[str, float]:
    names = _names(spec, kv, records, setting, dtype_bytes, ends)
    try:
        body = {name: float(expr(names)) for name, expr in ends.parts.items()}
    except ExprError as err:
        raise EndsError("bad_value", f"ends: {err}") from None
    body[LOSS_PART] = _losses(ends.losses[ends.default_loss], ends, names)[0]
    return {part: body[part] for part in END_PARTS}
