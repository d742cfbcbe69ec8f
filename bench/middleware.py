"""What each middleware costs a request, measured in-process.

    .venv/bin/python bench/middleware.py [--requests 3000] [--rounds 5] [--path PATH ...]

Builds Django's WSGI handler (as gunicorn serves it) with the project's
settings and calls it directly with a WSGI environ for the bench's constant
JSON view (`memoryadmin/benchfloors.py`), on an API route and on a page
route, through no middleware, the outermost one, the outermost two, ... and
the full `MIDDLEWARE`: a middleware's cost is what it adds to the stack
outside it. Time is this thread's CPU time (`time.thread_time`), which other
processes on a shared machine barely move; rounds interleave the stacks and
each figure is the least of the rounds' means, in microseconds per request.
Request logs are written (at INFO, as shipped) to /dev/null. No sockets, no
server: the figures are the Python work a request pays around its view.

    .venv/bin/python bench/middleware.py --served [--rounds 5] [--seconds 2]

serves the same stacks from one gunicorn (2 sync workers, gunicorn.conf.py
otherwise, request logs at INFO to /dev/null), stack i for the API route's constant
view with the header `X-Bench-Stack: i`, and the raw WSGI floor at its own path, and
drives each with wrk (one thread, 4 connections) in turn, round after round: each stack's requests a
second (the median of the rounds) against raw WSGI's, as `make bench`'s constant-view
row reads, and what each middleware adds in microseconds of the two workers' time a
request. A served request pays more for the same code than an in-process one: the
server's own work between requests leaves less of it in the processor's caches.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
os.environ.setdefault("MEMORYADMIN_DEV_SECRETS", "1")
os.environ["MEMORYADMIN_BENCH_FLOORS"] = "1"
os.environ.setdefault("LOG_LEVEL", "INFO")
os.environ.setdefault("MEMORYADMIN_METRICS_TOKEN", "bench")
# Metrics as gunicorn.conf.py serves them: each process's values in files of one folder.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="memoryadmin-metrics-"))

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402

from memoryadmin import benchfloors  # noqa: E402

PATHS = [benchfloors.CONSTANT_API_PATH, benchfloors.CONSTANT_PAGE_PATH]
# `--served`: the stack a request is served by (its WSGI name).
STACK_HEADER = "HTTP_X_BENCH_STACK"
WSGI = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def environ(path: str, method: str = "GET", body: bytes = b"", **headers: str) -> dict[str, Any]:
    """A WSGI environ for `path` (with its query), `body` (JSON) and more headers (by
    their WSGI names: x_api_key for x-api-key)."""
    path, _, query = path.partition("?")
    env = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "bench",
        "HTTP_ACCEPT": "*/*",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if body:
        env["CONTENT_LENGTH"] = str(len(body))
        env["CONTENT_TYPE"] = "application/json"
    env.update({f"HTTP_{name.upper()}": value for name, value in headers.items()})
    return env


def handler(middleware: list[str]) -> WSGI:
    settings.MIDDLEWARE = middleware
    return WSGIHandler()


def per_request(app: WSGI, path: str, requests: int) -> float:
    """Mean microseconds of one request through `app`."""
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        statuses.append(status)

    started = time.thread_time()
    for _ in range(requests):
        body = app(environ(path), start_response)
        b"".join(body)
        getattr(body, "close", lambda: None)()
    elapsed = time.thread_time() - started
    if not statuses[-1].startswith("200"):
        raise SystemExit(f"{path}: {statuses[-1]}")
    return elapsed / requests * 1e6


def quiet() -> None:
    """Settings as served (any host, no debug; errors raised), request logs to /dev/null."""
    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    settings.DEBUG_PROPAGATE_EXCEPTIONS = True
    null = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.StreamHandler):
            h.setStream(null)


def stacks() -> list[WSGI]:
    """Django's WSGI handler through no middleware, the outermost one, the outermost
    two, ... the full `MIDDLEWARE` (stack i: the outermost i)."""
    full = list(settings.MIDDLEWARE)
    apps = [handler(full[:i]) for i in range(len(full) + 1)]
    settings.MIDDLEWARE = full
    return apps


def served_app() -> WSGI:
    """gunicorn's application for `--served`: stack i for a request with the header
    `X-Bench-Stack: i` (the full stack otherwise), and raw WSGI at `RAW_PATH` before any
    of them. A header, not a query: the request door parses a query to check it, which
    `make bench`'s constant view (no query) does not pay."""
    apps = stacks()

    def application(env: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return apps[int(env.get(STACK_HEADER, "-1"))](env, start_response)

    return benchfloors.raw_wsgi(application)


def served(rounds: int, seconds: int) -> None:
    # `make bench`'s server, environment and wrk runs (bench/api.py sets up nothing more
    # when imported after this module).
    from api import WRK, Call, free_port, gunicorn, wrk_load

    if WRK is None:
        raise SystemExit("--served needs wrk on PATH (apt-get install wrk)")
    full = list(settings.MIDDLEWARE)
    port = free_port()
    server = gunicorn(port, app="middleware:served_app()")
    calls = [Call("GET", benchfloors.RAW_PATH)]
    calls += [
        Call("GET", benchfloors.CONSTANT_API_PATH, {"X-Bench-Stack": str(i)})
        for i in range(len(full) + 1)
    ]
    try:
        rates: list[list[float]] = [[] for _ in calls]
        for r in range(rounds):
            order = list(range(len(calls)))
            for i in order if r % 2 == 0 else reversed(order):
                rates[i].append(wrk_load(port, calls[i], seconds, 4).rate)
    finally:
        server.terminate()
        server.wait()
    rate = [statistics.median(found) for found in rates]
    raw, stacks_ = rate[0], rate[1:]

    def cost(i: int) -> float:  # the two workers' microseconds a request, stack i over i - 1
        return 2e6 / stacks_[i] - 2e6 / stacks_[i - 1]

    print(f"\nGET {benchfloors.CONSTANT_API_PATH} served by 2 sync workers, wrk -c4, median")
    print(f"of {rounds} rounds of {seconds} s; raw WSGI {raw:.0f} requests a second\n")
    print("| middleware (outermost first) | requests a second | ÷ raw WSGI | us a request |")
    print("| --- | --- | --- | --- |")
    print(f"| (none) | {stacks_[0]:.0f} | {stacks_[0] / raw:.3f} | |")
    for i, name in enumerate(full, start=1):
        print(f"| `{name}` | {stacks_[i]:.0f} | {stacks_[i] / raw:.3f} | {cost(i):.0f} |")
    print(f"| all of them | | | {2e6 / stacks_[-1] - 2e6 / stacks_[0]:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per stack and round")
    parser.add_argument("--rounds", type=int, default=None, help="20 in-process, 5 served")
    parser.add_argument("--path", action="append", help=f"default: {' and '.join(PATHS)}")
    parser.add_argument("--served", action="store_true", help="through gunicorn, with wrk")
    parser.add_argument("--seconds", type=int, default=2, help="--served: of each run")
    args = parser.parse_args()
    if args.served:
        served(args.rounds or 5, args.seconds)
        return
    args.rounds = args.rounds or 20
    quiet()
    full = list(settings.MIDDLEWARE)
    apps = stacks()
    for path in args.path or PATHS:
        for app in apps:
            per_request(app, path, 200)  # warm
        times: list[list[float]] = [[] for _ in apps]
        for _ in range(args.rounds):
            for i, app in enumerate(apps):
                times[i].append(per_request(app, path, args.requests))
        us = [min(t) for t in times]
        print(f"\nGET {path}: least of {args.rounds} rounds of {args.requests} requests\n")
        print("| middleware (outermost first) | us per request |")
        print("| --- | --- |")
        for i, name in enumerate(full, start=1):
            print(f"| `{name}` | {us[i] - us[i - 1]:.0f} |")
        print(f"| all of them | {us[-1] - us[0]:.0f} |")
        print(f"| the request without middleware | {us[0]:.0f} |")
        print(f"| the request through the full stack | {us[-1]:.0f} |")


if __name__ == "__main__":
    main()
