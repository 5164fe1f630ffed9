"""Pipeline schedules (catalogue/records/schedules.yaml): which layers each pipeline rank holds
and how many micro-batches of their activations it keeps at its peak, as the table `schedules`
the planner's SQL reads (docs/planning.md, "Pipeline schedules")."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from speccat.catalogue.datafile import Loader, read_yaml, version_of
from speccat.catalogue.errors import ReasonError

SCHEDULES_PATH = Path(__file__).with_name("schedules.yaml")
DEFAULTS = ("single", "virtual")  # the layouts a default schedule is for: vpp = 1, vpp > 1
COEFFICIENTS = ("pp_coefficient", "stage_coefficient", "constant")


class ScheduleError(ReasonError):
    """A schedules file the loader refuses."""

    group = "records"


@dataclass(frozen=True)
class Schedule:
    name: str
    in_flight: tuple[float, float, float]  # pp, stage and constant coefficients
    interleaved: bool  # times 1 + (pp - 1) / (pp vpp), vpp > 1; otherwise vpp = 1
    chunks: int  # pieces per pipeline rank the stack is cut into
    folded: bool  # rank i also holds piece chunks * pp - 1 - i
    min_pp: int
    head_in_flight: float | None  # micro-batches of the head's tensors on the rank holding the last piece; None: its in_flight
    default: str | None  # `single`, `virtual` or None
    source: str

    def takes(self, vpp: int) -> bool:
        """Whether a layout of `vpp` virtual stages per rank can run this schedule."""
        return vpp > 1 if self.interleaved else vpp == 1


@dataclass(frozen=True)
class Schedules:
    version: str
    by_name: dict[str, Schedule]

    def default(self, vpp: int) -> Schedule:
        """The schedule a layout of `vpp` virtual stages runs when none is asked for."""
        want = "virtual" if vpp > 1 else "single"
        return next(s for s in self.by_name.values() if s.default == want)

    def rows(self) -> list[dict[str, Any]]:
        """The catalogue's `schedules` rows (docs/catalogue.md)."""
        return [
            {"schedule": s.name, "flight_pp": s.in_flight[0], "flight_stage": s.in_flight[1], "flight_constant": s.in_flight[2],
             "interleaved": s.interleaved, "chunks": s.chunks, "folded": s.folded, "min_pp": s.min_pp, "head_flight": s.head_in_flight, "default_for": s.default,
             "source": s.source}
            for s in self.by_name.values()
        ]  # fmt: skip


class _Loader(Loader):
    error = ScheduleError

    def schedule(self, name: str, body: Any) -> Schedule:
        key = f"schedules.{name}"
        body = self.mapping(key, body, ("in_flight", "interleaved", "chunks", "folded", "head_in_flight", "min_pp", "default", "source"),
                            ("in_flight", "chunks", "source"))
        flight = self.mapping(f"{key}.in_flight", body["in_flight"], COEFFICIENTS, COEFFICIENTS)
        if not all(isinstance(flight[c], (int, float)) and not isinstance(flight[c], bool) for c in COEFFICIENTS):
            raise self.fail("bad_value", f"{key}.in_flight", "each coefficient must be a number")
        chunks, min_pp = body["chunks"], body.get("min_pp", 1)
        folded, interleaved = body.get("folded", False), body.get("interleaved", False)
        if chunks not in (1, 2) or isinstance(chunks, bool) or (chunks == 2 and not folded):
            raise self.fail("bad_value", f"{key}.chunks", "must be 1, or 2 with folded (a rank holds one piece or two)")
        if not isinstance(min_pp, int) or isinstance(min_pp, bool) or min_pp < 1:
            raise self.fail("bad_value", f"{key}.min_pp", "must be a positive integer")
        if not isinstance(folded, bool) or not isinstance(interleaved, bool):
            raise self.fail("bad_value", key, "folded and interleaved must be true or false")
        head = body.get("head_in_flight")
        if head is not None and (not isinstance(head, (int, float)) or isinstance(head, bool) or head <= 0):
            raise self.fail("bad_value", f"{key}.head_in_flight", "must be a positive number")
        if body.get("default") not in (None, *DEFAULTS):
            raise self.fail("bad_value", f"{key}.default", f"must be one of {', '.join(DEFAULTS)}")
        if not isinstance(body["source"], str) or not body["source"].strip():
            raise self.fail("bad_value", f"{key}.source", "must say where the numbers come from")
        coefficients = tuple(float(flight[c]) for c in COEFFICIENTS)
        return Schedule(name, coefficients, interleaved, chunks, folded, min_pp, None if head is None else float(head), body.get("default"),
                        " ".join(body["source"].split()))


@cache
def load_schedules(path: str | Path | None = None) -> Schedules:
    """Read schedules.yaml; each of `single` and `virtual` must be the default of one schedule."""
    path = Path(path) if path is not None else SCHEDULES_PATH
    loader = _Loader(path.name)
    data = read_yaml(path, lambda reason, what: loader.fail(reason, "", what))
    top = loader.mapping("", data, ("schedules",), ("schedules",))
    if not isinstance(top["schedules"], dict) or not top["schedules"]:
        raise loader.fail("bad_value", "schedules", "must map each schedule's name to its body")
    by_name = {name: loader.schedule(name, body) for name, body in top["schedules"].items()}
    for want in DEFAULTS:
        if sum(s.default == want for s in by_name.values()) != 1:
            raise loader.fail("bad_value", "schedules", f"exactly one schedule must be the {want} default")
    schedules = Schedules(version_of(data), by_name)
    if schedules.default(1).interleaved or not schedules.default(2).interleaved:
        raise loader.fail("bad_value", "schedules", "the virtual default must be interleaved and the single one not")
    return schedules
