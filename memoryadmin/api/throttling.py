"""The API's rate limit: DRF's throttle over the rule every door keeps
(memory/services/rate_limits.py)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from memoryadmin.memory.models import ApiKey
from memoryadmin.memory.services.rate_limits import request_count

# On a request (Django's) whose key's usage the rate limit counted (or found the cache
# unreachable for): KeyUsageMiddleware then counts only what the answer adds (an error,
# a 429).
USAGE_COUNTED = "_memoryadmin_usage_counted"


class ApiKeyRateThrottle(BaseThrottle):
    """Counts a keyed request (`request_count`); over a rate it raises `RateLimited`, which
    the API's exception handler answers as every domain error (429, Retry-After)."""

    def allow_request(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True  # public routes; a missing or bad key is refused before this
        setattr(request._request, USAGE_COUNTED, True)
        request_count(key)
        return True
