"""Whether the client of a request is still connected, where the server can tell."""

from __future__ import annotations

import socket
from collections.abc import Callable

from rest_framework.request import Request


def client_gone_probe(request: Request) -> Callable[[], bool] | None:
    """A probe that is true once the client closed its connection, or None where the
    server cannot see the connection (only gunicorn hands its socket to the app).

    The probe peeks without consuming: a client that sends more (a pipelined request)
    is still there; an orderly close reads as end of stream, a reset as an error.
    """
    sock = request.META.get("gunicorn.socket")
    if not isinstance(sock, socket.socket):
        return None

    def gone() -> bool:
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    return gone
