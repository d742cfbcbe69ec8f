"""The shared cache (Redis when REDIS_URL is set), used so that its outage is never an error.

Everything kept there can be lost: a key look-up is read from the database again, a
last-used mark is written again, a rate-limit count starts again. So when Redis cannot
be reached, callers get their fallback and the request goes on.
"""

from __future__ import annotations

import logging
import secrets
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


def stop_of(stops: Sequence[int], index: int) -> int:
    """The stop of counter `index` in `counters_bump`'s `stops` (0: none)."""
    return stops[index] if index < len(stops) else 0


def counters_bump(counters: Sequence[tuple[str, int]], stops: Sequence[int] = ()) -> list[int]:
    """Adds one to each `(name, timeout)` counter of the shared cache (made, when missing,
    to last `timeout` seconds) and returns their counts in order: one step of the local
    cache's lock, one round trip on Redis (core/rediscache.py). A counter whose count
    comes out past its stop (`stops[i]`, 0 or absent: none) leaves the counters after it
    as they are, their counts 0."""
    bump = getattr(cache, "counters_bump", None)
    if bump is not None:
        counted = bump(counters, stops=stops) if stops else bump(counters)
        return [int(count) for count in counted]
    counts: list[int] = []
    for index, (name, timeout) in enumerate(counters):
        if index and 0 < stop_of(stops, index - 1) < counts[-1]:
            return counts + [0] * (len(counters) - index)
        counts.append(_bump_with_incr(cache, name, timeout))
    return counts


def _bump_with_incr(cache: Any, name: str, timeout: int) -> int:
    # A deployer's own backend: Django's incr, and add for a counter that is missing.
    try:
        return int(cache.incr(name))
    except ValueError:  # missing (new, or expired): made, unless another request did
        if cache.add(name, 1, timeout=timeout):
            return 1
        return int(cache.incr(name))


@dataclass
class Slot:
    """A slot taken (`slot_take`): the cache's entry `name`, holding `token`."""

    name: str
    token: int
    seconds: int

    def keep(self) -> None:
        """Makes the slot last its `seconds` from now, while this holder has it."""
        tolerant(lambda: _slot_held(self.name, self.token, self.seconds), None)

    def give(self) -> None:
        """Gives the slot back, while this holder has it: once it has expired, another
        may hold it, and that one's stays."""
        tolerant(lambda: _slot_held(self.name, self.token, None), None)


def slot_take(name: str, seconds: int) -> Slot | None:
    """Takes the one slot `name` (one atomic `add`, seen by every process and instance
    sharing the cache) for `seconds` (`Slot.keep` extends it): it expires then, so a
    process that dies holding it frees it. None while another holds it; without a
    reachable cache, taken."""
    token = secrets.randbits(62) + 1
    taken = tolerant(lambda: cache.add(name, token, timeout=seconds), True)
    return Slot(name, token, seconds) if taken else None


def _slot_held(name: str, token: int, seconds: int | None) -> bool:
    """Whether `token` holds the slot `name`; if it does, the slot then lasts `seconds`
    from now, or is given back (None). One step of the local cache's lock, one script on
    Redis."""
    held = getattr(cache, "slot_held", None)
    if held is not None:
        return bool(held(name, token, seconds))
    # A deployer's own backend: a read, then a touch or delete (another process's `add`
    # can come between them only after the slot expired).
    if cache.get(name) != token:
        return False
    if seconds is None:
        cache.delete(name)
    else:
        cache.touch(name, seconds)
    return True
