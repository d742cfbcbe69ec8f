"""How many requests an API key, a person and a project may make: per key and per
project for API keys whatever the door (the management and session API, MCP over HTTP),
per person and per project for the pages.

A fixed window per key (`MEMORYADMIN_API_RATE`) and one per project for all its keys
together (`MEMORYADMIN_PROJECT_API_RATE`: however many keys a project makes, it gets no
more of the servers), each one atomic increment in the shared cache (INCR on Redis), so
concurrent requests on different instances never lose a count; both windows and the
key's usage this hour (key_usage.py) in one step, one round trip on Redis. A key of every
project (an operator's) has its own window only. Every request counts, a refused one too:
a key past its own rate spends its project's window, never another project's. Without a
reachable cache nothing is refused (core/sharedcache.py).

The pages count the same way in windows of their own (`MEMORYADMIN_PAGE_RATE` per person,
`MEMORYADMIN_PROJECT_PAGE_RATE` for a project's people together): an owner whose keys are
past the project's API rate can still use the pages to revoke them. But a person's
request past their own window is not counted in the project's: the project's people are
not all trusted alike, and one of them must not hold the others off.
"""

from __future__ import annotations

import math
import time

from django.conf import settings

from memoryadmin.core.errors import DomainError
from memoryadmin.core.rates import parse_rate
from memoryadmin.core.sharedcache import counters_bump, tolerant
from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.key_usage import key_usage_counter


class RateLimited(DomainError):
    """Over a rate: nothing was done; the same request succeeds after `retry_after`."""

    status = 429
    code = "rate_limited"
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(f"{message}; retry in {retry_after} seconds.", retry_after=retry_after)


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


def _count(
    limits: tuple[tuple[str, str, str], ...],
    also: tuple[str, int] | None,
    *,
    refused_spend_wider: bool = True,
) -> None:
    """Counts one request in the windows of `limits`, each `(rate, scope, what a refusal
    says past it)`, the widest last, and in the counter `also` if given, in one step;
    RateLimited naming the widest window it is over. Unless `refused_spend_wider`, a
    request past a window is not counted in the wider ones."""
    now = time.time()
    windows = [_window(rate, scope, now) for rate, scope, _ in limits]
    counters = [(name, timeout) for name, timeout, _ in windows]
    if also is not None:
        counters.append(also)
    stops = () if refused_spend_wider else [most for _, _, most in windows]
    counts = tolerant(lambda: counters_bump(counters, stops), None)
    if counts is None:
        return  # nothing is refused without the cache
    over = [i for i, (_, _, most) in enumerate(windows) if counts[i] > most]
    if over:
        # A retry then is past every window it is over.
        retry_after = max(_retry_after(limits[i][0], now) for i in over)
        rate, _, says = limits[over[-1]]
        raise RateLimited(f"{says} ({rate})", retry_after=retry_after)


def request_count(key: ApiKey) -> None:
    """Counts one request of `key` in its windows and in its usage; RateLimited where that
    puts it over a window (the project's named first)."""
    own = (settings.MEMORYADMIN_API_RATE, str(key.pk), "This API key is over its request rate")
    project = (
        settings.MEMORYADMIN_PROJECT_API_RATE,
        f"project:{key.project_id}",
        "This project's API keys together are over their request rate",
    )
    limits = (own,) if key.project_id is None else (own, project)
    _count(limits, key_usage_counter(key_id=key.pk))


def page_request_count(*, user_id: int, project_id: str | None) -> None:
    """Counts one request of a signed-in person for a project's pages: in their window
    and, where they have a role on it (`project_id`), in the window of the project's
    people together (a request for pages of a project one has no role on never spends
    that project's window). RateLimited where that puts it over one."""
    own = (
        settings.MEMORYADMIN_PAGE_RATE,
        f"person:{user_id}",
        "You are asking for pages faster than one person may",
    )
    project = (
        settings.MEMORYADMIN_PROJECT_PAGE_RATE,
        f"pages:{project_id}",
        "This project's people together are asking for pages faster than they may",
    )
    # A person past their own rate spends nothing of the project's: one member, whatever
    # their role, cannot keep the others (the owner among them) from the pages.
    _count((own,) if project_id is None else (own, project), None, refused_spend_wider=False)
