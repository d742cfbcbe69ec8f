"""gunicorn settings for `make serve`, read from the environment (docs/deploy.md).

gunicorn reads this file from the working directory; `-c gunicorn.conf.py` names it.
Each worker process runs `threads` request threads and keeps its own database pool.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise SystemExit(f"{name} must be an integer, not {raw!r}") from None


wsgi_app = "memoryadmin.wsgi:application"
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000").split(",")
workers = _int("WEB_CONCURRENCY", 2)
# gthread, with kept-alive connections spread evenly over the workers, each kept by its
# request thread between requests while no other needs it (memoryadmin/serving.py;
# GUNICORN_LINGER_MS).
worker_class = "memoryadmin.serving.BalancedThreadWorker"
threads = _int("GUNICORN_THREADS", 4)
# A request running longer than this gets its worker restarted.
timeout = _int("GUNICORN_TIMEOUT", 30)
# On SIGTERM (deploys), requests in flight get this long to finish.
graceful_timeout = _int("GUNICORN_GRACEFUL_TIMEOUT", 30)
keepalive = _int("GUNICORN_KEEPALIVE", 5)
# A client that sends nothing more of its request, or reads nothing of its answer, for
# GUNICORN_CLIENT_TIMEOUT seconds (30 by default) is cut off (memoryadmin/serving.py).
# Workers are replaced after this many requests (0, the default: never), staggered by
# the jitter. Nothing leaks (a worker's RSS is flat under load), and a replaced worker
# imports the whole project again while its share of requests waits
# (docs/decisions.md, Serving).
max_requests = _int("GUNICORN_MAX_REQUESTS", 0)
max_requests_jitter = _int("GUNICORN_MAX_REQUESTS_JITTER", 0)
# The application logs every request as JSON; gunicorn's access log would repeat it.
accesslog = None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# No control socket by default: two instances on one host would fight over its path.
control_socket_disable = not os.environ.get("GUNICORN_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]

# Metrics of every worker: prometheus_client keeps them in files in one folder,
# fresh for each start of the server (memoryadmin/metrics.py reads it).
_metrics_dir = tempfile.mkdtemp(prefix="memoryadmin-metrics-")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir


def on_starting(server: Any) -> None:
    """The application bounds each project's share of the request threads (requests
    waiting on memory providers) by the count the workers really run, read when a
    worker loads it (which also learns that it serves requests): command-line options
    win over this file, and gunicorn runs `--worker-class sync` as gthread when threads
    are more than one."""
    os.environ["MEMORYADMIN_REQUEST_THREADS"] = str(max(1, server.cfg.threads))
    # The workers serve requests: their statements are bounded
    # (MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS, memoryadmin/settings.py).
    os.environ["MEMORYADMIN_SERVES_REQUESTS"] = "1"
    from memoryadmin import serving

    if issubclass(server.cfg.worker_class, serving.BalancedThreadWorker):
        # Its settings, read by each worker, are checked once here: a bad one stops the
        # server with its message rather than every worker as it starts.
        serving.linger_seconds()
        serving.client_timeout_seconds()
        serving.board_create(server.cfg.workers)


def post_worker_init(worker: Any) -> None:
    """Before a worker accepts: every URLconf and the views they name are imported, so
    its first request does not pay for that (seconds on a busy machine), and so is the
    HTTP client of provider calls and webhooks (which other processes import at their
    first call). What the imports made lives as long as the worker: frozen, a full pass
    of the garbage collector, when one comes, does not walk it (about 126,000 objects,
    tens of ms)."""
    import gc

    from django.urls import reverse

    import memoryadmin.core.egress  # noqa: F401

    reverse("health")
    gc.collect()
    gc.freeze()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    from memoryadmin import serving

    multiprocess.mark_process_dead(worker.pid)
    serving.board_release(worker.pid)


def on_exit(server: Any) -> None:
    shutil.rmtree(_metrics_dir, ignore_errors=True)
