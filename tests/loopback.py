"""The base of the suite's own HTTP servers (fake providers, webhook receivers)."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any


class LoopbackServer(ThreadingHTTPServer):
    """A test's HTTP server. A client that goes away in the middle of a request (the tests
    of deadlines and cancellation do so on purpose) ends that request's thread quietly,
    instead of the traceback that socketserver prints into the run's output; any other
    error is printed as before."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
