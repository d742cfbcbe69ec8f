"""How each API key is used: requests, errors and 429s per hour, counted in the shared
cache (no database write on the request path): a request by the API's rate limit, in
the same step as its window (`key_usage_counter`), an error or a 429 as it finishes.

A count is a cache entry per key, hour and kind (`keyusage:<key>:<hour>:<kind>`), kept
USAGE_HOURS + 1 hours, so what is kept is bounded by the keys of a project times
USAGE_HOURS times three. Counts are a view of use, not a ledger: they start again if the
cache is lost or flushed, and with the local-memory cache (no REDIS_URL) each process
counts its own requests.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.cache import cache

from memoryadmin.core.sharedcache import counters_bump, tolerant
from memoryadmin.memory.models import ApiKey

USAGE_HOURS = 24
KINDS = ("requests", "errors", "throttled")


def _name(key_id: int, hour: int, kind: str) -> str:
    return f"keyusage:{key_id}:{hour}:{kind}"


KEPT_SECONDS = (USAGE_HOURS + 1) * 3600


def _hour(now: float | None) -> int:
    return int((time.time() if now is None else now) // 3600)


def key_usage_counter(*, key_id: int, now: float | None = None) -> tuple[str, int]:
    """The counter of the key's requests this hour, as `(name, timeout)`: for a caller
    that bumps it with a counter of its own in one step (`counters_bump`; the API's rate
    limit), then tells `key_usage_count` that it did."""
    return _name(key_id, _hour(now), "requests"), KEPT_SECONDS


def key_usage_count(
    *, key_id: int, status: int, now: float | None = None, requests_counted: bool = False
) -> None:
    """Counts one finished request of a key: every one (unless `requests_counted`: its
    `key_usage_counter` was bumped already), and as an error (4xx or 5xx but 429) or as
    throttled (429)."""
    hour = _hour(now)
    names = [] if requests_counted else [_name(key_id, hour, "requests")]
    if status == 429:
        names.append(_name(key_id, hour, "throttled"))
    elif status >= 400:
        names.append(_name(key_id, hour, "errors"))
    if names:
        tolerant(lambda: counters_bump([(name, KEPT_SECONDS) for name in names]), None)


@dataclass(frozen=True)
class Hour:
    start: int  # seconds since the epoch
    requests: int
    errors: int
    throttled: int


def key_usage(*, keys: Iterable[ApiKey], now: float | None = None) -> dict[int, list[Hour]]:
    """Each key's last USAGE_HOURS hours, oldest first (one read of the cache)."""
    current = _hour(now)
    hours = range(current - USAGE_HOURS + 1, current + 1)
    ids = [key.pk for key in keys]
    names = [_name(k, h, kind) for k in ids for h in hours for kind in KINDS]
    counts: dict[str, int] = tolerant(lambda: cache.get_many(names), {})
    return {
        k: [
            Hour(h * 3600, *(int(counts.get(_name(k, h, kind), 0)) for kind in KINDS))
            for h in hours
        ]
        for k in ids
    }
