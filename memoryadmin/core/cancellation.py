"""Cancelling provider calls: a child cancellation per call, tied to its caller.

Any provider kind's transport uses it: `current_cancellation()` inside the
runtime's scope, `Cancellation.watch(abort)` around an attempt.

The runtime opens a scope around a recall (named by its requestId) or a tool
call (named by its callId). The caller cancels it with the cancel endpoint,
from any instance: the request is a flag in the shared cache (Redis when
`REDIS_URL` is set). While an attempt is in flight a watcher polls the flag
and, once it is set, closes the attempt's connection, so the attempt stops
at once instead of running to its deadline; no further attempt starts.
Deadlines bound every attempt as before. While the shared cache cannot be
reached, calls run as if nobody cancelled them (a poll reads no flag) and a
cancel is refused (503) rather than lost without a word.

A caller also cancels by going away: each door passes a probe of its caller
(`caller_connection`): the API and the Memory page the client's connection
(`client_gone_probe`), the command line its signals (`core/cli.py`). Owner
operations on a provider's records open an unnamed scope, which only that
probe cancels.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from memoryadmin.core.errors import DomainError
from memoryadmin.core.sharedcache import tolerant

POLL_SECONDS = 0.1
# What a poll of an unreachable shared cache reads.
_UNREACHABLE = object()
# Seconds after which a cancel the shared cache could not carry may be tried again.
CANCEL_RETRY_SECONDS = 5
# A cancellation outlives any call it may concern by this margin.
TTL_MARGIN_SECONDS = 60


class Cancelled(DomainError):
    """The caller cancelled while an attempt was in flight (its outcome is unknown)."""

    status = 409
    code = "cancelled"


def _key(session_id: str, ref: str) -> str:
    digest = hashlib.sha256(f"{session_id}\0{ref}".encode()).hexdigest()[:32]
    return f"cancel:{digest}"


class CancelUnavailable(DomainError):
    """The shared cache cannot be reached: the cancellation could not be passed on."""

    status = 503
    code = "service_unavailable"


def cancel_request(*, session_id: str, ref: str) -> None:
    """Asks every instance to stop the calls of `ref` (a requestId or callId) of a session;
    CancelUnavailable (503) when the shared cache that carries it cannot be reached."""
    ttl = int(settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS) + TTL_MARGIN_SECONDS

    def put() -> bool:
        cache.set(_key(session_id, ref), 1, timeout=ttl)
        return True

    if not tolerant(put, False):
        raise CancelUnavailable(
            f"The cancellation could not be passed on (the shared cache is unreachable); "
            f"retry in {CANCEL_RETRY_SECONDS} seconds.",
            retry_after=CANCEL_RETRY_SECONDS,
        )


@dataclass
class Cancellation:
    """The cancellation of one caller's provider calls: by name through the shared cache
    (`key`), or because the caller's connection closed (`gone`)."""

    key: str | None
    gone: Callable[[], bool] | None = None
    event: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> bool:
        if self.event.is_set():
            return True
        if self.key is not None:
            flag = tolerant(lambda: cache.get(self.key), _UNREACHABLE)
            if flag is _UNREACHABLE:
                # The calls go on without it (their deadline still ends them), and ask it
                # no more: one warning a call, not one a poll.
                self.key = None
            elif flag:
                self.event.set()
        if self.gone is not None and self.gone():
            self.event.set()
        return self.event.is_set()

    def watch(self, abort: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
        """Calls `abort` (from another thread) as soon as the caller cancels."""
        return stop_watch(abort, cancellation=self)


# How often a watch looks at an event of the process (the cache is polled less often).
EVENT_POLL_SECONDS = 0.02


@contextmanager
def stop_watch(
    abort: Callable[[], None],
    *,
    cancellation: Cancellation | None,
    event: threading.Event | None = None,
) -> Iterator[None]:
    """Inside the block, calls `abort` (from another thread) as soon as the caller cancels
    or `event` is set (the call's answer is no longer wanted). An attempt's deadline is
    the watchdog's (core/watchdog.py, through core/exchange.py's `Outbound.send`)."""
    if cancellation is None and event is None:
        yield
        return
    done = threading.Event()

    def watcher() -> None:
        polled = 0.0
        while not done.wait(POLL_SECONDS if event is None else EVENT_POLL_SECONDS):
            if event is not None and event.is_set():
                abort()
                return
            now = time.monotonic()
            if cancellation is not None and now - polled >= POLL_SECONDS:
                polled = now
                if cancellation.poll():
                    abort()
                    return

    thread = threading.Thread(target=watcher, name="provider-cancel", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


_current: contextvars.ContextVar[Cancellation | None] = contextvars.ContextVar(
    "provider_cancellation", default=None
)


def current_cancellation() -> Cancellation | None:
    return _current.get()


_caller_gone: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "caller_gone", default=None
)


@contextmanager
def caller_connection(gone: Callable[[], bool] | None) -> Iterator[None]:
    """Inside the block, calls also stop when `gone()` says the caller went away (a door
    that can see its client's connection passes a probe of it)."""
    token = _caller_gone.set(gone)
    try:
        yield
    finally:
        _caller_gone.reset(token)


def client_gone_probe(request: HttpRequest) -> Callable[[], bool] | None:
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


@contextmanager
def cancellation_scope(
    *, session_id: str = "", ref: str | None = None
) -> Iterator[Cancellation | None]:
    """The cancellation of the calls made inside the block: by `ref` (a session's call)
    through the cancel endpoint, and by the caller going away where the door can see it."""
    gone = _caller_gone.get()
    if not ref and gone is None:
        yield None
        return
    cancellation = Cancellation(key=_key(session_id, ref) if ref else None, gone=gone)
    token = _current.set(cancellation)
    try:
        yield cancellation
    finally:
        _current.reset(token)
