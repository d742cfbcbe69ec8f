"""The shared cache (Redis when REDIS_URL is set), used so that its outage is never an error.

Everything kept there can be lost: a key look-up is read from the database again, a
last-used mark is written again, a rate-limit count starts again. So when Redis cannot
be reached, callers get their fallback and the request goes on.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from django.core.cache import cache

logger = logging.getLogger(__name__)


def _redis_errors() -> tuple[type[BaseException], ...]:
    # Only a Redis client raises RedisError, and a process that has one has
    # imported redis: processes without Redis (the CLI, SQLite set-ups) never
    # pay for importing it.
    exceptions = sys.modules.get("redis.exceptions")
    return (exceptions.RedisError,) if exceptions is not None else ()


def tolerant[T](operation: Callable[[], T], fallback: T) -> T:
    try:
        return operation()
    except _redis_errors() as exc:
        logger.warning("The shared cache is unreachable (%s); going on without it.", exc)
        return fallback


def counters_bump(counters: Sequence[tuple[str, int]]) -> list[int]:
    """Adds one to each `(name, timeout)` counter of the shared cache (made, when missing,
    to last `timeout` seconds) and returns their counts in order: one step of the local
    cache's lock, one round trip on Redis (core/rediscache.py)."""
    bump = getattr(cache, "counters_bump", None)
    if bump is not None:
        return [int(count) for count in bump(counters)]
    return [_bump_with_incr(cache, name, timeout) for name, timeout in counters]


def _bump_with_incr(cache: Any, name: str, timeout: int) -> int:
    # A deployer's own backend: Django's incr, and add for a counter that is missing.
    try:
        return int(cache.incr(name))
    except ValueError:  # missing (new, or expired): made, unless another request did
        if cache.add(name, 1, timeout=timeout):
            return 1
        return int(cache.incr(name))


def slot_take(name: str, seconds: int) -> bool:
    """Takes the one slot `name` (one atomic `add`, seen by every process and instance
    sharing the cache) for at most `seconds`: it expires then, so a process that dies
    holding it frees it. False while another holds it; without a reachable cache, taken."""
    return bool(tolerant(lambda: cache.add(name, 1, timeout=seconds), True))


def slot_give(name: str) -> None:
    """Gives the slot `name` back (nothing if it expired meanwhile)."""
    tolerant(lambda: cache.delete(name), None)
