"""Calls a function at an instant unless the block it guards ended first.

An outbound call must end by its deadline even when the other side sends its
answer one byte at a time: socket timeouts count per read, so only closing
the connection from outside ends it. One thread of the process waits for
every guarded deadline, so guarding a call costs no thread of its own.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress


class Guard:
    """One armed deadline: `fired` once `cut` was called."""

    def __init__(self, at: float, cut: Callable[[], None]) -> None:
        self.at = at
        self.cut = cut
        self.fired = False
        self.disarmed = False
        self.lock = threading.Lock()


class _Watchdog:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Guard]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, guard: Guard) -> None:
        with self._wake:
            heapq.heappush(self._heap, (guard.at, next(self._order), guard))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                at, _, guard = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
            with guard.lock:
                if guard.disarmed:
                    continue
                guard.fired = True
                with suppress(Exception):
                    guard.cut()


_watchdog = _Watchdog()


@contextmanager
def cut_at(at: float, cut: Callable[[], None]) -> Iterator[Guard]:
    """Inside the block, `cut` runs (from another thread) once `time.monotonic()` reaches
    `at`; after the block it never runs, and `guard.fired` says whether it did."""
    guard = Guard(at, cut)
    _watchdog.arm(guard)
    try:
        yield guard
    finally:
        with guard.lock:
            guard.disarmed = True
