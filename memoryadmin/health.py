"""Health checks and the answer to requests while the database cannot be reached.

`/healthz` (liveness) answers without touching the database: the process serves. `/readyz`
(readiness) answers 200 while the instance can serve requests, which needs the database,
with every migration of this code applied (a release whose `migrate` has not run yet reads
"migrations pending"): a load balancer sends traffic only to instances that answer 200.
Redis (`REDIS_URL`) is checked too but is not needed to serve (the API works without its
shared cache), so while it alone is down the answer stays 200 with status "degraded": an
outage of the one Redis every instance shares must not take every instance out of the load
balancer. Both answer JSON.
"""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.recorder import MigrationRecorder
from django.http import HttpRequest, JsonResponse

from memoryadmin.core.dbstate import RETRY_AFTER_SECONDS

# How long a readiness check waits for Redis.
REDIS_TIMEOUT_SECONDS = 2.0


Migration = tuple[str, str]  # (app label, name)


@functools.cache
def _needed_migrations() -> tuple[tuple[Migration, tuple[Migration, ...]], ...]:
    """Each app's latest migration in this code's files (the graph's leaves), with the
    migrations it replaces if it is a squash (applied as those, it counts as applied, as
    `migrate` counts it): read once per process (about 30 ms)."""
    from django.db.migrations.loader import MigrationLoader

    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    return tuple(
        (leaf, tuple(tuple(key) for key in graph.nodes[leaf].replaces or ()))
        for leaf in sorted(graph.leaf_nodes())
    )


def _database() -> str:
    # Reading what `migrate` recorded (its table looked up, then read) says the database answers.
    try:
        applied = MigrationRecorder(connection).applied_migrations()
    except DatabaseError:
        return "unavailable"
    for leaf, replaced in _needed_migrations():
        if leaf not in applied and not (replaced and all(key in applied for key in replaced)):
            return "migrations pending"
    return "ok"


def _redis() -> str | None:
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return None
    import redis

    client = redis.Redis.from_url(
        url, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, socket_timeout=REDIS_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except redis.RedisError:
        return "unavailable"
    finally:
        client.close()
    return "ok"


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, Any] = {"database": _database()}
    redis_status = _redis()
    if redis_status is not None:
        checks["redis"] = redis_status
    if checks["database"] == "ok":
        status = "ok" if all(value == "ok" for value in checks.values()) else "degraded"
        return JsonResponse({"status": status, "checks": checks})
    response = JsonResponse({"status": "unavailable", "checks": checks}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
