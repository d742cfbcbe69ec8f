"""What an API key may ask for: requests per key and per project, whatever the door (the
management and session API, MCP over HTTP).

A fixed window per key (`MEMORYADMIN_API_RATE`) and one per project for all its keys
together (`MEMORYADMIN_PROJECT_API_RATE`: however many keys a project makes, it gets no
more of the servers), each one atomic increment in the shared cache (INCR on Redis), so
concurrent requests on different instances never lose a count; both windows and the
key's usage this hour (key_usage.py) in one step, one round trip on Redis. A key of every
project (an operator's) has its own window only. Every request counts, a refused one too:
a key past its own rate spends its project's window, never another project's. Without a
reachable cache nothing is refused (core/sharedcache.py).
"""

from __future__ import annotations

import functools
import math
import time

from django.conf import settings

from memoryadmin.core.errors import DomainError
from memoryadmin.core.sharedcache import counters_bump, tolerant
from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.key_usage import key_usage_counter

PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


class RateLimited(DomainError):
    """Over a rate: nothing was done; the same request succeeds after `retry_after`."""

    status = 429
    code = "rate_limited"
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(f"{message}; retry in {retry_after} seconds.", retry_after=retry_after)


@functools.cache
def parse_rate(rate: str) -> tuple[int, int]:
    """`1200/minute` as (1200, 60)."""
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period]


def _window(rate: str, scope: str, now: float) -> tuple[str, int, int]:
    """The counter of the fixed window of `rate` that `now` is in, for the requests of
    `scope`: its name and timeout (its period and a second, so that it outlives the
    window), and the window's limit."""
    limit, period = parse_rate(rate)
    return f"ratelimit:{scope}:{period}:{int(now // period)}", period + 1, limit


def _retry_after(rate: str, now: float) -> int:
    """Whole seconds, rounded up (at least one), until the window of `rate` that `now` is
    in ends: a retry then is in the next window."""
    period = parse_rate(rate)[1]
    return max(1, math.ceil((int(now // period) + 1) * period - now))


def request_count(key: ApiKey) -> None:
    """Counts one request of `key` in its windows and in its usage; RateLimited where that
    puts it over a window (the project's named first)."""
    now = time.time()
    key_rate = settings.MEMORYADMIN_API_RATE
    key_window, key_timeout, key_limit = _window(key_rate, str(key.pk), now)
    counters = [(key_window, key_timeout)]
    project = key.project_id
    if project is not None:
        project_rate = settings.MEMORYADMIN_PROJECT_API_RATE
        project_window, project_timeout, project_limit = _window(
            project_rate, f"project:{project}", now
        )
        counters.append((project_window, project_timeout))
    counters.append(key_usage_counter(key_id=key.pk, now=now))
    counts = tolerant(lambda: counters_bump(counters), None)
    if counts is None:
        return  # nothing is refused without the cache (its usage is not counted either)
    key_over = counts[0] > key_limit
    project_over = project is not None and counts[1] > project_limit
    if not (key_over or project_over):
        return
    # A retry then is past every window it is over.
    retry_after = max(
        _retry_after(key_rate, now) if key_over else 1,
        _retry_after(project_rate, now) if project_over else 1,
    )
    if project_over:
        raise RateLimited(
            f"This project's API keys together are over their request rate ({project_rate})",
            retry_after=retry_after,
        )
    raise RateLimited(
        f"This API key is over its request rate ({key_rate})", retry_after=retry_after
    )
