"""A WSGI app and worker for the serving tests, served by a real gunicorn: the worker
(the shipped one) counts the connections its request threads handed back to its main
thread, and the app answers every request with that count and how many of its large
answers were closed unfinished; `/body` reads the request's body, `/large` answers 64 MiB,
`/stopped` stops its streamed answer part-way (as a download past its seconds does)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
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


# Answers a client stopped reading before their end (their iterator closed).
answers_closed = 0


class _Large:
    """64 MiB in 1 MiB pieces, more than any socket's buffers hold."""

    def __iter__(self) -> Iterator[bytes]:
        piece = b"x" * (1 << 20)
        for _ in range(64):
            yield piece

    def close(self) -> None:
        global answers_closed
        answers_closed += 1


def _stopped() -> Iterator[bytes]:
    yield b"part of it"
    raise TimeoutError("The download stopped unfinished at its deadline.")


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/stopped":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return _stopped()
    if path == "/large":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return _Large()
    if path == "/body":
        read = environ["wsgi.input"].read()  # all of it, as an application reads a body
        body = json.dumps({"read": len(read)}).encode()
    else:
        body = json.dumps({"handedBack": handed_back, "answersClosed": answers_closed}).encode()
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
