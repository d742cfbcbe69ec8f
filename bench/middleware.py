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
"""

from __future__ import annotations

import argparse
import io
import logging
import os
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per stack and round")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--path", action="append", help=f"default: {' and '.join(PATHS)}")
    args = parser.parse_args()
    quiet()
    full = list(settings.MIDDLEWARE)
    # Stack i is the first i middleware of MIDDLEWARE (the outermost i).
    apps = [handler(full[:i]) for i in range(len(full) + 1)]
    settings.MIDDLEWARE = full
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
