"""The op vector: the ten op names every layer kind counts (DESIGN §2.1), in their fixed order.

These are names, the schema of the vector, not counts or formulas: the counts live in the
family profiles (census/profiles/*.yaml) and the formulas in catalogue/records/records.yaml. The
census imports this module (census → catalogue is the direction data flows).
"""

OPS: tuple[str, ...] = (
    "attMM",
    "attBMM",
    "ffMM",
    "softmax",
    "dropout",
    "normOp",
    "gather",
    "headCast",
    "ffAct",
    "linrec",
)

# Where a measured byte that no op claims is booked (DESIGN §2.5).
OTHER = "other"

# The parts a layer's bytes are split into (DESIGN §3.1).
PARTS: tuple[str, ...] = ("attention", "ffn", "norm")
