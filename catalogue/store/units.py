"""Byte units, tabled once: the units a byte figure prints in (`--units`, present.format_bytes and
human_bytes) and those a size is written in (`speccat fit --gpu-mem 80GiB`)."""

from __future__ import annotations

# Binary units, smallest first: human_bytes picks the largest that keeps a figure >= 1.
BINARY: dict[str, int] = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# Decimal units: a size may be written in them (a datasheet's 141GB), nothing prints in them.
DECIMAL: dict[str, int] = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
# How byte figures print (`--units`): `human` (the largest binary unit that keeps the number
# >= 1), or always in one unit, `bytes` a whole number of them. CSV and JSON carry raw bytes.
PRINTED: dict[str, int | None] = {"human": None, "bytes": BINARY["B"], **{u: BINARY[u] for u in ("KiB", "MiB", "GiB")}}
# The units a size may be written in, by their lower-case name (`80gib` reads as `80GiB`).
WRITTEN: dict[str, int] = {name.lower(): scale for name, scale in {**BINARY, **DECIMAL}.items()}
