"""Requests per API key and per project, counted in the shared cache so the limits hold
across instances."""

from __future__ import annotations

import functools
import time
from typing import Any

from django.conf import settings
from rest_framework import exceptions
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


def window(rate: str, scope: str, now: float) -> tuple[str, int, int]:
    """The counter of the fixed window of `rate` that `now` is in, for the requests of
    `scope`: its name and timeout (its period and a second, so that it outlives the
    window), and the window's limit."""
    limit, period = parse_rate(rate)
    return f"ratelimit:{scope}:{period}:{int(now // period)}", period + 1, limit


def window_left(rate: str, now: float) -> float:
    """Seconds until the window of `rate` that `now` is in ends."""
    period = parse_rate(rate)[1]
    return (int(now // period) + 1) * period - now


class ProjectThrottled(exceptions.Throttled):
    default_detail = "This project's API keys together are over their request rate."


class ApiKeyRateThrottle(BaseThrottle):
    """A fixed window per key (`MEMORYADMIN_API_RATE`) and one per project for all its keys
    together (`MEMORYADMIN_PROJECT_API_RATE`: a project's keys cannot take the server from
    the others however many it makes), one atomic increment each per request (INCR on
    Redis), so concurrent requests on different instances never lose a count. The key's
    usage this hour is counted in the same step. An all-projects key (an operator's) has
    its own window only. Without a reachable cache, requests are let through rather than
    refused."""

    def __init__(self) -> None:
        self.retry_after = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True  # public routes; a missing or bad key is refused before this
        now = time.time()
        key_window, key_timeout, key_limit = window(settings.MEMORYADMIN_API_RATE, str(key.pk), now)
        counters = [(key_window, key_timeout)]
        project = key.project_id
        if project is not None:
            project_rate = settings.MEMORYADMIN_PROJECT_API_RATE
            project_window, project_timeout, project_limit = window(
                project_rate, f"project:{project}", now
            )
            counters.append((project_window, project_timeout))
        counters.append(key_usage_counter(key_id=key.pk, now=now))
        # One step of the shared cache (one round trip on Redis) for all of them.
        counts = tolerant(lambda: counters_bump(counters), None)
        if counts is None:
            return True
        setattr(request._request, USAGE_COUNTED, True)
        key_over = counts[0] > key_limit
        project_over = project is not None and counts[1] > project_limit
        if not (key_over or project_over):
            return True
        # Retrying succeeds once every window it is over has ended.
        self.retry_after = max(
            window_left(settings.MEMORYADMIN_API_RATE, now) if key_over else 0.0,
            window_left(project_rate, now) if project_over else 0.0,
        )
        if project_over:
            raise ProjectThrottled(self.retry_after)
        return False

    def wait(self) -> float:
        return self.retry_after
