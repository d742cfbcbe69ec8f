"""The MCP server's threads: its sync work off the event loop, each project within its share.

Every MCP handler's database and provider work runs as a unit on one pool of
`MEMORYADMIN_MCP_THREADS` worker threads (anyio's, under a capacity limiter),
so a slow provider in one project holds one thread, not the server. A project
may hold, or wait for, at most `MEMORYADMIN_MCP_THREADS_PER_PROJECT` of them at
once; past its share a unit is refused at once (ThreadsBusy, 429) rather than
queued behind the project's own slow work, so one project alone can never make
another wait for a thread.

A unit runs as Django runs a request: connections gone stale are closed before
it, and after it every database connection of its thread is closed (returned to
the pool), since a worker thread may end when idle and must keep none. A unit the
database cannot serve (no connection, a statement past its statement_timeout)
raises the 503 every door answers then (DatabaseUnavailable), which the handlers
answer as any refusal. Any other failure of a unit (a defect) is logged with its
traceback and answered as the API answers one (`InternalError`, 500 `internal_error`,
"An internal error occurred."): its text, which may name tables, values or paths, never
reaches the client. No unit relies on running on a particular thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections

from memoryadmin.core.concurrency import deadline_seconds
from memoryadmin.core.dbstate import database_unavailable, unavailable_error
from memoryadmin.core.errors import DomainError

logger = logging.getLogger(__name__)


class InternalError(DomainError):
    """A unit failed for a reason that is no refusal (a defect): logged, answered plainly."""

    status = 500
    code = "internal_error"


class ThreadsBusy(DomainError):
    """The project holds its share of the MCP threads: nothing was run; retry later."""

    status = 429
    code = "rate_limited"
    retry_after: int

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, details={"reason": "concurrency_limit"}, retry_after=retry_after)


def _unit[T](fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    try:
        close_old_connections()
        return fn(*args)
    except DomainError:
        raise
    except DatabaseError as exc:
        if database_unavailable(exc):
            raise unavailable_error(exc) from exc
        logger.exception("MCP unit failed")
        raise InternalError("An internal error occurred.") from exc
    except Exception as exc:
        logger.exception("MCP unit failed")
        raise InternalError("An internal error occurred.") from exc
    finally:
        connections.close_all()


class Threads:
    """One server's pool of threads for sync work, with each project's share of it."""

    def __init__(self, *, threads: int | None = None, share: int | None = None) -> None:
        self.threads = threads or int(settings.MEMORYADMIN_MCP_THREADS)
        self.share = share or int(settings.MEMORYADMIN_MCP_THREADS_PER_PROJECT)
        self._limiter = anyio.CapacityLimiter(self.threads)
        self._lock = threading.Lock()
        # Per project, when each of its units (running or waiting) was admitted.
        self._held: dict[str, list[float]] = {}

    async def run[T](self, project_id: str | None, fn: Callable[..., T], /, *args: Any) -> T:
        """`fn(*args)` on a thread of the pool, counted against `project_id`'s share (work
        not yet known to belong to a project, such as reading the API key, counts for none)."""
        if project_id is None:
            return await self._run(fn, args)
        admitted = self._take(project_id)
        try:
            return await self._run(fn, args)
        finally:
            self._release(project_id, admitted)

    async def _run[T](self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        # Not abandoned on cancellation: the share is released once the thread is done.
        return await anyio.to_thread.run_sync(partial(_unit, fn, args), limiter=self._limiter)

    def _take(self, project_id: str) -> float:
        now = time.monotonic()
        with self._lock:
            held = self._held.setdefault(project_id, [])
            if len(held) >= self.share:
                # A unit's provider work ends by the provider deadline, so by then the
                # project's oldest unit has freed its thread.
                wait = min(held) + deadline_seconds() - now
                raise ThreadsBusy(
                    f"Project '{project_id}' holds its share of this MCP server's threads "
                    f"({len(held)} of {self.share}); retry later.",
                    retry_after=max(1, math.ceil(wait)),
                )
            held.append(now)
        return now

    def _release(self, project_id: str, admitted: float) -> None:
        with self._lock:
            held = self._held[project_id]
            held.remove(admitted)
            if not held:
                del self._held[project_id]
