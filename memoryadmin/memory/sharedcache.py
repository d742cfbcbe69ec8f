"""The shared cache (Redis when REDIS_URL is set), used so that its outage is never an error.

Everything kept there can be lost: a key look-up is read from the database again, a
last-used mark is written again, a rate-limit count starts again. So when Redis cannot
be reached, callers get their fallback and the request goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


def tolerant[T](operation: Callable[[], T], fallback: T) -> T:
    try:
        return operation()
    except RedisError as exc:
        logger.warning("The shared cache is unreachable (%s); going on without it.", exc)
        return fallback
