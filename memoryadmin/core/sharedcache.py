"""The shared cache (Redis when REDIS_URL is set), used so that its outage is never an error.

Everything kept there can be lost: a key look-up is read from the database again, a
last-used mark is written again, a rate-limit count starts again. So when Redis cannot
be reached, callers get their fallback and the request goes on.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

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


def counter_bump(name: str, *, timeout: int) -> int:
    """Adds one to a counter of the shared cache (made, when missing, to last `timeout`
    seconds) and returns it: one round trip on Redis (core/rediscache.py)."""
    from django.core.cache import cache

    bump = getattr(cache, "counter_bump", None)
    if bump is not None:
        return int(bump(name, timeout=timeout))
    try:
        return int(cache.incr(name))
    except ValueError:  # missing (new, or expired): made, unless another request did
        if cache.add(name, 1, timeout=timeout):
            return 1
        return int(cache.incr(name))
