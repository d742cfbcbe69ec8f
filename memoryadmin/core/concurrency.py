"""How many provider calls run at once: one shared deadline per recall, bounds per project.

A recall calls its bound providers concurrently, all within one deadline. Two
bounds per server process keep one project's slow provider from occupying
the server:

- the request threads: a request waiting on providers holds the thread that
  serves it, so one project may have at most
  `MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT` such requests at once (half the
  process's `MEMORYADMIN_REQUEST_THREADS` by default), and all projects
  together all the threads but one;
- the calls: at most `MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT` calls in
  flight per project, counting each parallel call of a recall (a thread each).

Beyond either, a new call is refused at once (ProviderBusy, with the seconds
after which a slot is certain to be free) instead of waiting.

Worker threads here only exchange HTTP: they never touch the database, whose
connections belong to the thread that opened them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType

from django.conf import settings

from memoryadmin.core.errors import ProviderBusy


def deadline_seconds() -> float:
    """Each operation's time across all its attempts (the protocol's 10 seconds)."""
    return float(settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS)


def concurrency_limit() -> int:
    return int(settings.MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT)


def requests_limit() -> int:
    """Requests of one project that may wait on providers at once in this process: as
    configured, else half the request threads."""
    configured = int(settings.MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT)
    return configured or max(1, int(settings.MEMORYADMIN_REQUEST_THREADS) // 2)


def requests_limit_total() -> int:
    """Requests of all projects together: every request thread but one, so a request
    that calls no provider always finds a thread."""
    return max(1, int(settings.MEMORYADMIN_REQUEST_THREADS) - 1)


@dataclass(frozen=True)
class Deadline:
    """One instant seen two ways: for waiting (monotonic) and for `deadlineAt` (wall clock)."""

    at: float
    wall: datetime

    @classmethod
    def after(cls, seconds: float | None = None) -> Deadline:
        if seconds is None:
            seconds = deadline_seconds()
        wall = datetime.now(UTC) + timedelta(seconds=seconds)
        return cls(at=time.monotonic() + seconds, wall=wall)

    def remaining(self) -> float:
        return self.at - time.monotonic()


# In this process, per project: the deadline of each call in flight, and of each
# request (thread) waiting on them; `_requests_all` holds every project's requests.
_lock = threading.Lock()
_in_flight: dict[str, list[float]] = {}
_requests: dict[str, list[float]] = {}
_requests_all: list[float] = []
# Whether this thread already holds a request's place (a call made inside another
# call of the same request counts no second request).
_holding = threading.local()


def in_flight(project_id: str) -> int:
    with _lock:
        return len(_in_flight.get(project_id, ()))


def requests_waiting(project_id: str) -> int:
    with _lock:
        return len(_requests.get(project_id, ()))


def _busy(what: str, held: list[float], limit: int, deadline: Deadline) -> ProviderBusy:
    # Every call ends by its deadline, so the earliest one frees a slot.
    wait_seconds = min(held, default=deadline.at) - time.monotonic()
    return ProviderBusy(
        f"{what} {len(held)} of {limit}; retry later.",
        retry_after=max(1, math.ceil(wait_seconds)),
    )


class _Slots:
    """Slots taken together for calls of one project's request; released once, together."""

    def __init__(self, project_id: str, count: int, deadline: Deadline, request: bool) -> None:
        self.project_id = project_id
        self.count = count
        self.deadline = deadline.at
        self.request = request
        self._released = False

    @classmethod
    def take(cls, *, project_id: str, count: int, deadline: Deadline) -> _Slots:
        request = not getattr(_holding, "active", False)
        with _lock:
            calls = _in_flight.get(project_id, [])
            waiting = _requests.get(project_id, [])
            if request and len(waiting) + 1 > requests_limit():
                raise _busy(
                    f"Project '{project_id}' has requests waiting on memory providers:",
                    waiting,
                    requests_limit(),
                    deadline,
                )
            if request and len(_requests_all) + 1 > requests_limit_total():
                raise _busy(
                    "This server's requests waiting on memory providers:",
                    _requests_all,
                    requests_limit_total(),
                    deadline,
                )
            if len(calls) + count > concurrency_limit():
                raise _busy(
                    f"Project '{project_id}' has memory provider calls in flight:",
                    calls,
                    concurrency_limit(),
                    deadline,
                )
            _in_flight.setdefault(project_id, []).extend([deadline.at] * count)
            if request:
                _requests.setdefault(project_id, []).append(deadline.at)
                _requests_all.append(deadline.at)
        if request:
            _holding.active = True
        return cls(project_id, count, deadline, request)

    def release(self) -> None:
        with _lock:
            if self._released:
                return
            self._released = True
            _remove(_in_flight, self.project_id, self.deadline, self.count)
            if self.request:
                _remove(_requests, self.project_id, self.deadline, 1)
                _requests_all.remove(self.deadline)

    def leave_thread(self) -> None:
        """The request's thread is free again (its calls may still be ending elsewhere)."""
        if self.request:
            _holding.active = False


def _remove(held: dict[str, list[float]], project_id: str, deadline: float, count: int) -> None:
    entries = held[project_id]
    for _ in range(count):
        entries.remove(deadline)
    if not entries:
        del held[project_id]


class ProviderCalls[T]:
    """Runs one request's provider calls concurrently within one deadline.

    Use as a context manager; `run` yields `(index, result)` as calls finish.
    Leaving the block early (the caller found a failure) stops retries of
    the calls still running; their slots are released when they end, so the
    cap counts every call that may still reach a provider.
    """

    def __init__(self, *, project_id: str, count: int, deadline: Deadline) -> None:
        # More calls than the cap run in turns on `cap` threads rather than
        # being refused for ever.
        self.workers = max(1, min(count, concurrency_limit()))
        self.deadline = deadline
        self.cancelled = threading.Event()
        self._slots = _Slots.take(project_id=project_id, count=self.workers, deadline=deadline)
        self._executor: ThreadPoolExecutor | None = None
        self._futures: list[Future[T]] = []

    def __enter__(self) -> ProviderCalls[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cancelled.set()
        self._slots.leave_thread()
        if self._executor is None:
            self._slots.release()
            return
        self._executor.shutdown(wait=False, cancel_futures=True)
        if not self._futures:
            # No call was started (no thread could be): nothing holds the slots.
            self._slots.release()
            return
        remaining = [len(self._futures)]
        counter = threading.Lock()

        def done(_: Future[T]) -> None:
            with counter:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._slots.release()

        # A future already done runs its callback at once.
        for future in self._futures:
            future.add_done_callback(done)

    def one(self, call: Callable[[threading.Event], T]) -> T:
        """Runs a single call in the caller's own thread."""
        return call(self.cancelled)

    def run(self, calls: Sequence[Callable[[threading.Event], T]]) -> Iterator[tuple[int, T]]:
        if not calls:
            return
        if len(calls) == 1:
            # One call needs no thread.
            yield 0, self.one(calls[0])
            return
        self._executor = ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="provider-call"
        )
        # One at a time: where no thread can be started for a call (the process's limit),
        # the calls submitted before it are those whose end gives the slots back.
        for call in calls:
            try:
                future = self._executor.submit(call, self.cancelled)
            except RuntimeError as exc:
                # The server is at its limit of threads: refused as the cap refuses, for
                # a retry; the calls already started end on their own (their cancel set).
                raise ProviderBusy(
                    "The server cannot start another thread for provider calls now.",
                    retry_after=1,
                ) from exc
            self._futures.append(future)
        index_of = {id(future): index for index, future in enumerate(self._futures)}
        pending = set(self._futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=lambda f: index_of[id(f)]):
                yield index_of[id(future)], future.result()


def provider_call[T](
    *, project_id: str, deadline: Deadline, call: Callable[[threading.Event], T]
) -> T:
    """One provider call, counted against the project's cap; ProviderBusy beyond it."""
    with ProviderCalls[T](project_id=project_id, count=1, deadline=deadline) as calls:
        return calls.one(call)
