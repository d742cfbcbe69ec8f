"""A WSGI app and worker for the serving tests, served by a real gunicorn: the worker
(the shipped one) counts the connections its request threads handed back to its main
thread, and the app answers every request with that count."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from memoryadmin.serving import BalancedThreadWorker

handed_back = 0

# Read by gunicorn as its configuration (`--config python:tests.serving_app`).
control_socket_disable = True


class CountingWorker(BalancedThreadWorker):
    def finish_request(self, conn: Any, fs: Any) -> None:
        global handed_back
        handed_back += 1
        super().finish_request(conn, fs)


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = json.dumps({"handedBack": handed_back}).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
