"""The database pool's check of a connection when a request takes it.

psycopg's pool can run an empty statement on every connection it hands out, so that
one left dead by an outage is replaced instead of failing a request: a database round
trip before every request's first query. A connection that passed the check within
the last `FRESH_SECONDS` is handed out without it: under load each connection is
checked about once a second instead of on every request, and one that sat idle
longer (the case after an outage) is checked as before. A connection that dies inside
that second fails the request that takes it, as a request in flight at the outage
does, and the pool discards it when it comes back broken.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg_pool import ConnectionPool

FRESH_SECONDS = 1.0


def pool_check(connection: Any) -> None:
    """The pool's `check`: raises when the connection no longer works."""
    now = time.monotonic()
    if now - getattr(connection, "_memoryadmin_checked", -FRESH_SECONDS) < FRESH_SECONDS:
        return
    ConnectionPool.check_connection(connection)
    connection._memoryadmin_checked = now
