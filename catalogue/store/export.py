"""`speccat export DIR`: the planners' tables as Parquet, partitioned by setting.

Tables and views with a setting_id are written as hive partitions (DIR/NAME/setting_id=ID/
data_0.parquet); the small ones as one file each (DIR/NAME.parquet). A manifest
(DIR/_speccat_export.json) names the run, the versions and each table's row count. The export
is built in a sibling folder and swapped in, so DIR never holds half of two exports; an
existing DIR that has no manifest is refused (InputError "bad_argument") rather than overwritten.
The statements are sql/steps/export_*.sql.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from pathlib import Path

import duckdb

from speccat import sql
from speccat.catalogue.errors import InputError
from speccat.catalogue.store.file import count_rows, open_readonly

MANIFEST = "_speccat_export.json"
# Partitioned by setting: the prices a planner reads for its own setting.
PARTITIONED: tuple[str, ...] = ("layer_prices", "full_prices", "switch_costs", "model_prices", "model_full_prices")
# One file each: what a planner joins the prices with.
WHOLE: tuple[str, ...] = (
    "settings", "switch_sets", "specs", "kinds", "stack", "repos", "configs", "runs", "infeasible_settings", "measured", "point_prices",
    "end_prices", "loss_prices", "op_costs", "op_prices", "fits_on", "state_sharding", "switch_ops", "switch_kept", "accelerators", "schedules",
    "losses", "framework_flags", "flag_sets", "fits_on_sizes",
    "failures",
)
# The planners' wide views (one SELECT, no join), partitioned by readable names
# (NAME/seq=8192/tp=4/data_0.parquet), every column described in the Parquet schema's field
# metadata (`description`, `unit`) from the view's header (catalogue/store/comments.py).
# Readable views evaluated once and split into their partitions in memory (the frontier is about
# a million rows at 1,000 configs, and one evaluation of it costs as much as one partition's);
# the others are queried partition by partition.
SPLIT_IN_MEMORY: frozenset[str] = frozenset({"frontier"})
READABLE: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "planner_layer_prices": (("seq", "seq_length_tokens"), ("tp", "tp_ranks")),
    "frontier": (("seq", "seq_length_tokens"), ("tp", "tp_ranks")),
}


def export(db_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Write the planners' tables of the catalogue at `db_path` into `out_dir`; return the manifest."""
    with contextlib.closing(open_readonly(db_path)) as con:
        return export_from(con, str(Path(db_path).resolve()), out_dir)


def export_from(con: duckdb.DuckDBPyConnection, catalogue: str, out_dir: str | os.PathLike) -> dict:
    """`export` from an open read-only connection (the file's, or a lake's as its default
    catalog); `catalogue` names it in the manifest."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise InputError("bad_argument", f"{out} exists and is not a speccat export (no {MANIFEST}); choose another folder")
    building = out.with_name(f".{out.name}.export-{uuid.uuid4().hex[:8]}")
    building.mkdir(parents=True)
    try:
        tables = {}
        for name in PARTITIONED:
            con.execute(sql.render("steps/export_partitioned", table=name, path=str(building / name)))
            tables[name] = count_rows(con, name)
        for name in WHOLE:
            con.execute(sql.render("steps/export_whole", table=name, path=str(building / f"{name}.parquet")))
            tables[name] = count_rows(con, name)
        for name, partitions in READABLE.items():
            tables[name] = _export_readable(con, name, partitions, building / name)
        cursor = con.execute(sql.load("steps/export_latest_run"))
        latest = cursor.fetchone()
        latest_columns = [d[0] for d in cursor.description]
        manifest = {
            "catalogue": catalogue,
            "latest_run": None if latest is None else dict(zip(latest_columns, latest)),
            "partitioned_by": {**{name: "setting_id" for name in PARTITIONED}, **{n: "/".join(p[0] for p in parts) for n, parts in READABLE.items()}},
            "tables": tables,
        }
        (building / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _swap_in(building, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return manifest


def _swap_in(building: Path, out: Path) -> None:
    old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
    if out.exists():
        os.replace(out, old)
    os.replace(building, out)
    shutil.rmtree(old, ignore_errors=True)


def _export_readable(con: duckdb.DuckDBPyConnection, name: str, partitions, folder: Path) -> int:
    """One Parquet file per partition of view `name`, under readable folder names, each field
    described; the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from speccat.catalogue.store.comments import description, view_columns

    import pyarrow.compute as pc

    columns = view_columns(name)
    (label_a, first), (label_b, second) = partitions
    if name in SPLIT_IN_MEMORY:
        whole = con.execute(sql.render("steps/table_rows", table=name)).to_arrow_table()
        keys = sorted(set(zip(whole[first].to_pylist(), whole[second].to_pylist())))

        def partition(a, b):
            return whole.filter(pc.and_(pc.equal(whole[first], a), pc.equal(whole[second], b)))
    else:
        keys = con.execute(sql.render("steps/export_partition_keys", table=name, first=first, second=second)).fetchall()

        def partition(a, b):
            return con.execute(
                sql.render("steps/export_partition_rows", table=name, first=first, second=second), {"first": a, "second": b}
            ).to_arrow_table()

    rows = 0
    for a, b in keys:
        table = partition(a, b)
        fields = []
        for field in table.schema:
            unit, meaning = columns[field.name]
            fields.append(field.with_metadata({"description": description(unit, meaning), "unit": unit}))
        schema = pa.schema(fields, metadata={"speccat.table": name, "speccat.descriptions": json.dumps({f: description(*columns[f]) for f in table.column_names})})
        target = folder / f"{label_a}={a}" / f"{label_b}={b}"
        target.mkdir(parents=True)
        pq.write_table(table.cast(schema), target / "data_0.parquet")
        rows += table.num_rows
    return rows
