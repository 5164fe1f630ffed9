"""A catalogue in memory for one spec: its first night staged, checked and merged as a publish
does it, with every macro and view, and never written anywhere; a later night of the same spec
adds the settings it prices beside those held. `speccat fit` prices its spec into one and asks
the planner's macros (sql/macros/), so that fit and the catalogue's views answer by the same
SQL; a search (`--max-seq`, ...) asks about one spec at many settings in turn, hence the
adding, which costs a few table appends where a whole catalogue costs a schema, its views and
a merge.
"""

from __future__ import annotations

import duckdb

from speccat.catalogue.store.file import store_night
from speccat.catalogue.store.schema import create_schema, ingest
from speccat.catalogue.store.night import NightData, StoreError

# What a later night adds: the settings it prices and every price at them.
PER_SETTING = ("settings", "layer_prices", "full_prices", "switch_costs", "end_prices", "loss_prices", "op_costs", "infeasible_settings", "point_prices")


class MemoryCatalogue:
    """An in-memory catalogue holding one spec and the settings it was priced at (`settings`:
    their ids). `con` is its connection; close() frees it."""

    def __init__(self, night: NightData):
        night.validate()
        self.specs = frozenset(night.specs)
        self.settings = {s["setting_id"] for s in night.settings}
        self.con = duckdb.connect()
        try:
            create_schema(self.con)
            store_night(self.con, night, night.arrow_tables())
        except BaseException:
            self.con.close()
            raise

    def add(self, night: NightData) -> None:
        """`night`'s settings and their prices beside those held: a night of the spec held, at
        the same versions, pricing settings not held yet (StoreError "bad_run" otherwise, the
        catalogue unchanged)."""
        night.validate()
        if frozenset(night.specs) != self.specs:
            raise StoreError("bad_run", f"a catalogue in memory holds {sorted(self.specs)}; the night brings {sorted(night.specs)}")
        new = {s["setting_id"] for s in night.settings}
        if new & self.settings:
            raise StoreError("bad_run", f"settings already held: {sorted(new & self.settings)}")
        tables = night.arrow_tables()
        self.con.begin()
        try:
            for name in PER_SETTING:
                ingest(self.con, name, tables[name])
            self.con.commit()
        except BaseException:
            self.con.rollback()
            raise
        self.settings |= new

    def close(self) -> None:
        self.con.close()
