"""Prometheus metrics at `/metrics`: requests, provider calls, the database pool.

Off (404) unless `MEMORYADMIN_METRICS_TOKEN` is set; then scrapers send it as
`Authorization: Bearer <token>`. Under gunicorn every worker process writes its values
into `PROMETHEUS_MULTIPROC_DIR` (gunicorn.conf.py sets it) and a scrape adds them up.
"""

from __future__ import annotations

import functools
import hmac
import os
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

REQUESTS = Counter(
    "memoryadmin_http_requests",
    "HTTP requests answered, by method, route and status.",
    ["method", "route", "status"],
)
LATENCY = Histogram(
    "memoryadmin_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and route.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
PROVIDER_CALLS = Counter(
    "memoryadmin_provider_calls",
    "Calls to http memory providers, by operation (recall, tool) and outcome.",
    ["operation", "outcome"],
)
PROVIDER_LATENCY = Histogram(
    "memoryadmin_provider_call_duration_seconds",
    "Time a provider call took, retries included, by operation.",
    ["operation"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DATABASE_UNAVAILABLE = Counter(
    "memoryadmin_database_unavailable",
    "Requests answered 503 because the database could not be reached.",
)
POOL = Gauge(
    "memoryadmin_db_pool_connections",
    "Database pool connections of the live worker processes: open, idle, max, waiting "
    "(requests waiting for a connection).",
    ["state"],
    multiprocess_mode="livesum",
)

UNMATCHED = "<unmatched>"
# The method label of a request whose method is none of these: a client chooses the
# method, and each new label would be a new series (and memo entry) for as long as the
# worker lives.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "<other>"


def _route(request: HttpRequest) -> str:
    """The URL pattern, not the path: one series per route, whatever the ids."""
    match = getattr(request, "resolver_match", None)
    return "/" + match.route if match is not None and match.route else UNMATCHED


def pool_observe() -> None:
    """The default database pool's sizes (PostgreSQL with DATABASE_POOL only)."""
    connection = connections["default"]
    pool = getattr(type(connection), "_connection_pools", {}).get(connection.alias)
    if pool is None:
        return
    stats = pool.get_stats()
    size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
    POOL.labels("open").set(size)
    POOL.labels("idle").set(available)
    POOL.labels("max").set(stats.get("pool_max", 0))
    POOL.labels("waiting").set(stats.get("requests_waiting", 0))


# A worker's pool gauges are written at most this often by its requests (and by each
# scrape the worker answers): a scrape sees every live worker's pool as of at most this
# many seconds ago.
POOL_EVERY_SECONDS = 1.0


class MetricsMiddleware:
    """Counts and times every request; outermost, so its time includes the middleware.

    Each series' child is looked up once per process (`labels()` takes a lock and
    builds its key on every call); every request still writes its count and time.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.latency: dict[tuple[str | None, str], Any] = {}
        self.requests: dict[tuple[str | None, str, int], Any] = {}
        self.pool_at = -POOL_EVERY_SECONDS

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        finished = time.perf_counter()
        method, route, status = request.method, _route(request), response.status_code
        if method not in METHODS:
            method = OTHER_METHOD
        latency = self.latency.get((method, route))
        if latency is None:
            latency = self.latency[method, route] = LATENCY.labels(method, route)
        latency.observe(finished - started)
        counter = self.requests.get((method, route, status))
        if counter is None:
            counter = self.requests[method, route, status] = REQUESTS.labels(
                method, route, str(status)
            )
        counter.inc()
        if finished - self.pool_at >= POOL_EVERY_SECONDS:
            self.pool_at = finished
            pool_observe()
        return response


P = ParamSpec("P")
R = TypeVar("R")


def provider_metered(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Records a provider call's outcome: its `kind` (tools), `ok` (recalls), or the
    failure's `reason` when it raises."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            outcome = "error"
            try:
                result = function(*args, **kwargs)
                outcome = getattr(result, "kind", "ok")
                return result
            except Exception as exc:
                outcome = getattr(exc, "reason", None) or type(exc).__name__
                raise
            finally:
                PROVIDER_LATENCY.labels(operation).observe(time.perf_counter() - started)
                PROVIDER_CALLS.labels(operation, outcome).inc()

        return wrapped

    return decorate


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.MEMORYADMIN_METRICS_TOKEN
    if not token:
        from django.http import Http404

        raise Http404
    sent = request.headers.get("Authorization", "")
    if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("A bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    pool_observe()
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
