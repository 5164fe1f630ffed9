-- Table schedules: catalogue/records/schedules.yaml as rows, the latest night's (the store
-- replaces it at every publish): per pipeline schedule, the micro-batches rank `stage` of pp
-- keeps at its peak, in units of one micro-batch through the layers it holds,
-- flight_pp * pp + flight_stage * stage + flight_constant (times 1 + (pp - 1) / (pp vpp) where
-- interleaved), and which layers it holds: the stack cut into chunks * pp pieces, rank i
-- holding piece i and, where folded, piece chunks * pp - 1 - i. Key: schedule.
CREATE TABLE IF NOT EXISTS schedules (
    schedule        VARCHAR PRIMARY KEY,
    flight_pp       DOUBLE NOT NULL,
    flight_stage    DOUBLE NOT NULL,
    flight_constant DOUBLE NOT NULL,
    interleaved     BOOLEAN NOT NULL,  -- times 1 + (pp - 1) / (pp vpp), for vpp > 1 virtual stages; else vpp = 1
    chunks          INTEGER NOT NULL,  -- pieces per pipeline rank the stack is cut into
    folded          BOOLEAN NOT NULL,  -- rank i also holds piece chunks * pp - 1 - i
    min_pp          INTEGER NOT NULL,  -- the fewest pipeline ranks it runs on
    head_flight     DOUBLE,            -- micro-batches of the head's tensors on the rank holding the last piece (NULL: its flight)
    default_for     VARCHAR,           -- single: the schedule of vpp = 1 when none is asked; virtual: of vpp > 1
    source          VARCHAR NOT NULL   -- where the numbers come from
);
