"""Stable codes the catalogue stores beside the census's own (census/spec.py REASONS).

The SQL schema declares each tuple as an ENUM (sql/schema.sql); tests check the two agree.
The flow imports these when it builds failures rows and runs (catalogue/store/rundata.py).
"""

# Why a repo could not be fetched (the flow's fetch stage, DESIGN §5).
FETCH_REASONS: tuple[str, ...] = ("gated", "not_found", "fetch_failed", "rate_limited")

# The pipeline stage a failures row comes from.
STAGES: tuple[str, ...] = ("list", "fetch", "census", "price")

# How a run ended: every repo stored, some repos failed, or the run itself failed.
RUN_STATUSES: tuple[str, ...] = ("completed", "partial", "failed")

# Where a run's repos came from.
SOURCES: tuple[str, ...] = ("hub", "snapshot")

# The Hub's `gated` field (False, "auto" or "manual"), stored as these codes.
GATING: dict[object, str] = {False: "no", "auto": "auto", "manual": "manual"}
