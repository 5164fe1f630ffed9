"""The Hub's request budget for a night: flows/hub_limits.yaml's quotas, counted and honoured.

huggingface_hub makes every request of a night through one shared `httpx2.Client`, built by the
factory `huggingface_hub.set_client_factory` installs. `Budget.installed()` installs a factory
whose client is huggingface_hub's own (`default_client_factory`: its request hook, redirects,
no timeout) with two more event hooks:

- before each request, `acquire` counts it in its bucket (`api` for /api/, `resolvers` for a
  /resolve/ URL; a signed CDN URL a resolver redirects to counts in neither, as on the Hub). A
  bucket that has spent its share of the window's quota, or whose last `RateLimit` header said
  nothing remains, waits for the next window; when that wait would pass the night's deadline
  it raises `BudgetSpent` instead, and the request is never sent;
- after each response, `observe` reads the Hub's `RateLimit` and `RateLimit-Policy` headers
  (huggingface_hub's own `parse_ratelimit_headers`): what remains of the bucket and when its
  window ends, and a quota lower than the table's.

A 429 is still huggingface_hub's to retry: `http_backoff` waits as `RateLimit` (or
`Retry-After`) says and tries again, and each try passes through `acquire` and is counted.
The factory is huggingface_hub's again when the night ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speccat.catalogue.datafile import read_yaml

# The limits a night spends within: the shipped file, or the file this environment variable names
# (another endpoint's limits: a mirror, an enterprise Hub, the benchmarks' stand-in, which has none).
LIMITS_ENV = "SPECCAT_HUB_LIMITS"
LIMITS_PATH = Path(os.environ.get(LIMITS_ENV) or Path(__file__).with_name("hub_limits.yaml"))
BUCKETS = ("api", "resolvers", "pages")
KEYS = ("window_s", "tiers", "tier", "share", "night_s", "full_listing_every", "page_models")


@dataclass(frozen=True)
class HubLimits:
    """flows/hub_limits.yaml, checked."""

    window_s: float
    tiers: dict[str, dict[str, int]]  # tier -> bucket -> requests per window
    tier: str  # the default tier
    share: float  # of each quota a night may spend
    night_s: float  # the longest a night's listing and fetching may take, waits included
    full_listing_every: int  # nights
    page_models: int  # models per listing page

    def quotas(self, tier: str | None = None) -> dict[str, int]:
        """Requests per window a night may spend in each bucket: the tier's quota times `share`."""
        chosen = tier or self.tier
        if chosen not in self.tiers:
            from speccat.catalogue.errors import InputError

            raise InputError("bad_argument", f"unknown Hub tier {chosen!r}; allowed: {', '.join(self.tiers)} ({LIMITS_PATH.name})")
        return {bucket: max(1, math.floor(q * self.share)) for bucket, q in self.tiers[chosen].items()}


def load_limits(path: Path = LIMITS_PATH) -> HubLimits:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: must be a mapping")
    unknown, missing = sorted(set(data) - set(KEYS)), sorted(set(KEYS) - set(data))
    if unknown or missing:
        raise ValueError(f"{path.name}: unknown key(s) {unknown}, missing key(s) {missing}")
    tiers = data["tiers"]
    if not isinstance(tiers, dict) or not tiers:
        raise ValueError(f"{path.name}: tiers: must map each tier to its quotas")
    for name, quotas in tiers.items():
        if not (isinstance(quotas, dict) and set(quotas) == set(BUCKETS)
                and all(isinstance(q, int) and q > 0 for q in quotas.values())):  # fmt: skip
            raise ValueError(f"{path.name}: tiers.{name}: must give a positive integer for each of {', '.join(BUCKETS)}, got {quotas!r}")
    if data["tier"] not in tiers:
        raise ValueError(f"{path.name}: tier: must name one of tiers ({', '.join(tiers)}), got {data['tier']!r}")
    if not (isinstance(data["share"], (int, float)) and 0 < data["share"] <= 1):
        raise ValueError(f"{path.name}: share: must be a number in (0, 1], got {data['share']!r}")
    for key in ("window_s", "night_s", "full_listing_every", "page_models"):
        if not (isinstance(data[key], (int, float)) and not isinstance(data[key], bool) and data[key] > 0):
            raise ValueError(f"{path.name}: {key}: must be a positive number, got {data[key]!r}")
    return HubLimits(
        float(data["window_s"]), {k: dict(v) for k, v in tiers.items()}, data["tier"], float(data["share"]),
        float(data["night_s"]), int(data["full_listing_every"]), int(data["page_models"]),
    )  # fmt: skip


LIMITS = load_limits()


def bucket_of(path: str) -> str | None:
    """The Hub's rate-limit bucket of a request path (the Hub's rate-limits page)."""
    if path.startswith("/api/"):
        return "api"
    if "/resolve/" in path:
        return "resolvers"
    return None  # a CDN or storage URL a resolver redirected to: not the Hub's to count


class BudgetSpent(Exception):
    """The night's budget allows no more requests: raised before the request is sent.

    Not a ReasonError: it is no failure of the repo being fetched, which is left for the next
    night (docs/refresh.md)."""

    def __init__(self, bucket: str, message: str):
        super().__init__(message)
        self.bucket = bucket

    def __reduce__(self):
        return (type(self), (self.bucket, str(self)))


class Budget:
    """Requests per bucket in fixed windows of `window_s`, at most `quotas[bucket]` in each; a
    wait for the next window is allowed while it ends before `deadline` (time.monotonic())."""

    def __init__(
        self, quotas: dict[str, int], window_s: float, night_s: float,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    ):  # fmt: skip
        self.quotas = dict(quotas)
        self.window_s = window_s
        self.clock, self.sleep = clock, sleep
        self.started = clock()
        self.deadline = self.started + night_s
        self.used: Counter[str] = Counter()  # the whole night
        self.waited_s = 0.0
        self.windows = 1
        self.spent: str | None = None  # the bucket that stopped the night, once one did
        self._window_start = self.started
        self._in_window: Counter[str] = Counter()
        self._server: dict[str, tuple[int, float]] = {}  # bucket -> (remaining, when its window ends)
        self._lock = threading.Lock()

    @classmethod
    def from_limits(cls, limits: HubLimits = LIMITS, tier: str | None = None, **kwargs) -> Budget:
        return cls(limits.quotas(tier), limits.window_s, limits.night_s, **kwargs)

    def acquire(self, bucket: str) -> None:
        """Count one request in `bucket`, first waiting for the next window if this one is spent;
        BudgetSpent when the wait would pass the deadline (or a thread already found it would)."""
        while True:
            with self._lock:
                if self.spent is not None:
                    raise BudgetSpent(self.spent, f"the night's Hub budget is spent ({self.spent}); the rest waits for the next night")
                now = self.clock()
                self._roll(now)
                wait = self._wait(bucket, now)
                if wait <= 0:
                    self._in_window[bucket] += 1
                    self.used[bucket] += 1
                    remaining = self._server.get(bucket)
                    if remaining is not None:
                        self._server[bucket] = (remaining[0] - 1, remaining[1])
                    return
                if now + wait > self.deadline:
                    self.spent = bucket
                    raise BudgetSpent(
                        bucket, f"the Hub budget for {bucket} is spent until the next window, {wait:.0f} s away, past the night's end",
                    )
            self.sleep(wait)
            with self._lock:
                self.waited_s += wait

    def _roll(self, now: float) -> None:
        elapsed = int((now - self._window_start) // self.window_s)
        if elapsed > 0:
            self._window_start += elapsed * self.window_s
            self._in_window.clear()
            self.windows += elapsed

    def _wait(self, bucket: str, now: float) -> float:
        """Seconds to wait before a request in `bucket` may go (0: at once)."""
        waits = [0.0]
        if self._in_window[bucket] >= self.quotas.get(bucket, math.inf):
            waits.append(self._window_start + self.window_s - now)
        remaining, reset_at = self._server.get(bucket, (1, now))
        if remaining <= 0 and reset_at > now:
            waits.append(reset_at - now)
        return max(waits)

    def observe(self, bucket: str, headers) -> None:
        """What the Hub said of the bucket: `RateLimit` (remaining, seconds to the window's end)
        and `RateLimit-Policy` (its quota and window), as huggingface_hub parses them."""
        from huggingface_hub.utils import parse_ratelimit_headers

        info = parse_ratelimit_headers(headers)
        if info is None:
            return
        hub_bucket = info.resource_type if info.resource_type in BUCKETS else bucket
        with self._lock:
            self._server[hub_bucket] = (info.remaining, self.clock() + info.reset_in_seconds)
            if info.limit is not None and info.window_seconds:
                # A quota lower than the table's (another plan, a changed limit) wins: spend the
                # same share of it, over the Hub's window.
                share = LIMITS.share
                allowed = max(1, math.floor(info.limit * share * self.window_s / info.window_seconds))
                if allowed < self.quotas.get(hub_bucket, math.inf):
                    self.quotas[hub_bucket] = allowed

    def report(self) -> dict[str, Any]:
        """The budget a night used: requests per bucket, windows, seconds waited, and why it stopped."""
        return {
            "requests": {b: self.used[b] for b in BUCKETS if b in self.quotas},
            "quotas": dict(self.quotas),
            "window_s": self.window_s,
            "windows": self.windows,
            "waited_s": round(self.waited_s, 1),
            "stopped": self.spent,
        }

    # -- the client huggingface_hub uses --------------------------------------------------

    def client_factory(self, base: Callable[[], Any] | None = None) -> Callable[[], Any]:
        """A factory for huggingface_hub's shared client: `base`'s client (huggingface_hub's
        default) with this budget's request and response hooks added."""
        from huggingface_hub.utils._http import default_client_factory

        base = base or default_client_factory

        def request_hook(request) -> None:
            bucket = bucket_of(request.url.path)
            if bucket is not None:
                self.acquire(bucket)

        def response_hook(response) -> None:
            bucket = bucket_of(response.request.url.path)
            if bucket is not None:
                self.observe(bucket, response.headers)

        def factory():
            client = base()
            hooks = client.event_hooks
            client.event_hooks = {
                "request": [*hooks.get("request", []), request_hook],
                "response": [*hooks.get("response", []), response_hook],
            }
            return client

        return factory

    @contextlib.contextmanager
    def installed(self) -> Iterator[Budget]:
        """huggingface_hub's requests go through this budget inside the block."""
        from huggingface_hub import set_client_factory
        from huggingface_hub.utils import _http

        previous = _http._GLOBAL_CLIENT_FACTORY
        set_client_factory(self.client_factory(previous))
        try:
            yield self
        finally:
            set_client_factory(previous)
