"""Requests per API key, counted in the shared cache so the limit holds across instances."""

from __future__ import annotations

import functools
import time
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from memoryadmin.core.sharedcache import counters_bump, tolerant
from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.key_usage import key_usage_counter

PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


@functools.cache
def parse_rate(rate: str) -> tuple[int, int]:
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period]


# On a request (Django's) whose key's usage counter the rate limit bumped with its own:
# KeyUsageMiddleware then counts only what the answer adds (an error, a 429).
USAGE_COUNTED = "_memoryadmin_usage_counted"


def count(name: str, period: int, usage: tuple[str, int]) -> int:
    """Adds one to the window's counter and to the key's usage counter (`usage`), in one
    step of the shared cache (one round trip on Redis), and returns the window's."""
    return counters_bump([(name, period + 1), usage])[0]


class ApiKeyRateThrottle(BaseThrottle):
    """A fixed window per key: one atomic increment per request (INCR on Redis),
    so concurrent requests on different instances never lose a count. The key's usage
    this hour is counted in the same step. Without a reachable cache, requests are let
    through rather than refused."""

    def __init__(self) -> None:
        self.retry_after = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True  # public routes; a missing or bad key is refused before this
        limit, period = parse_rate(settings.MEMORYADMIN_API_RATE)
        now = time.time()
        window = int(now // period)
        usage = key_usage_counter(key_id=key.pk, now=now)
        name = f"ratelimit:{key.pk}:{period}:{window}"
        used = tolerant(lambda: count(name, period, usage), None)
        if used is None:
            return True
        setattr(request._request, USAGE_COUNTED, True)
        if used <= limit:
            return True
        self.retry_after = (window + 1) * period - now
        return False

    def wait(self) -> float:
        return self.retry_after
