"""Requests per API key, counted in the shared cache so the limit holds across instances."""

from __future__ import annotations

import functools
import time
from typing import Any

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from memoryadmin.core.sharedcache import counter_bump, tolerant
from memoryadmin.memory.models import ApiKey

PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


@functools.cache
def parse_rate(rate: str) -> tuple[int, int]:
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period]


def count(name: str, period: int) -> int:
    """Adds one to the window's counter and returns it."""
    return counter_bump(name, timeout=period + 1)


class ApiKeyRateThrottle(BaseThrottle):
    """A fixed window per key: one atomic increment per request (INCR on Redis),
    so concurrent requests on different instances never lose a count. Without a
    reachable cache, requests are let through rather than refused."""

    def __init__(self) -> None:
        self.retry_after = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True  # public routes; a missing or bad key is refused before this
        limit, period = parse_rate(settings.MEMORYADMIN_API_RATE)
        now = time.time()
        window = int(now // period)
        used = tolerant(lambda: count(f"ratelimit:{key.pk}:{period}:{window}", period), 0)
        if used <= limit:
            return True
        self.retry_after = (window + 1) * period - now
        return False

    def wait(self) -> float:
        return self.retry_after
