"""The fork server's warm-up: one census and pricing of a small shipped config
(flows/warm_up.yaml), run as this module is imported.

multiprocessing's fork server has one hook, the modules it imports before it forks
(`set_forkserver_preload`), and this module is one of flows/isolate.py's PRELOAD. Importing
torch and transformers is not all a first census pays: its first call sets up torch's dispatch
and FakeTensor caches and the rest of transformers' lazy machinery, 0.2 to 0.7 s a config on
the 2-core machine. Paid once here, every forked child starts with it done.

A warm-up that fails is reported on stderr and left: each child then pays its own first call,
as before, and the census itself reports whatever is wrong with the config it was given.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from speccat.catalogue.datafile import read_yaml

HERE = Path(__file__).resolve().parent
SETTINGS = read_yaml(HERE / "warm_up.yaml")


def warm_up() -> float:
    """Census and price the warm-up config at the census's sequence length; its seconds."""
    from speccat.catalogue.records.settings import default_setting
    from speccat.census import load_config_file
    from speccat.flows.analysis import analyse

    config = load_config_file(HERE / SETTINGS["config"])
    started = time.perf_counter()
    analyse(config, "warm-up", default_setting()["seq_length"])
    return time.perf_counter() - started


def warmed_before() -> bool:
    """Whether this process inherited a warm-up that succeeded in another (its fork server), not
    one it ran itself: what a forked census child can tell of itself."""
    return ERROR is None and WARMED_IN != os.getpid()


WARMED_IN = os.getpid()
try:
    SECONDS, ERROR = warm_up(), None
except Exception as err:  # an optimisation only: the children still census, each paying its first call
    SECONDS, ERROR = None, f"{type(err).__name__}: {err}"
    print(f"speccat: the census warm-up failed, each census child pays its own first call: {ERROR}", file=sys.stderr)
