"""gunicorn's gthread worker, with kept-alive connections spread over the workers.

A kept-alive connection stays with the worker that accepted it, and every worker's
main thread accepts as soon as the listener is readable, however busy its request
threads are: four clients could leave three connections on one worker and one on
the other, so one process (one core, under the GIL) did three quarters of the work.

Here every worker publishes how many connections it holds on a board in memory
shared by the master's forks (`gunicorn.conf.py` makes it before any worker
starts). A worker accepts only while it holds fewer than its share of one more
connection, so the least loaded ones take new clients; and a worker holding more
than its share answers its next request with `Connection: close`, so that client
reconnects to a worker with room. With one worker, or without a board, it is
gthread unchanged.

And a kept-alive connection stays with its request thread between requests while
the worker holds no more connections than it has threads: gthread hands every
connection back to its main thread after each answer (the future's callback, the
wake-up pipe, two poller changes, a hand-off to the pool again), which cost more
than a small request itself. The thread waits for the next request up to
`GUNICORN_LINGER_MS` (a second by default); it gives the connection back at once
when another connection comes and would have no thread, and when the worker stops.
"""

from __future__ import annotations

import ctypes
import logging
import math
import multiprocessing
import multiprocessing.synchronize
import os
import select
import socket
import struct
from collections.abc import Callable
from typing import Any

from gunicorn.workers.gthread import TConn, ThreadWorker

# While a worker does not accept, it looks at the board again this often (another
# worker's count may have risen meanwhile, making room here): a new connection waits
# this long at most. Its main thread sleeps otherwise, its connections being served in
# their request threads, so nothing else wakes it sooner.
RECHECK_SECONDS = 0.01


class HeadTimedOut(logging.Filter):
    """gthread reads a request's head inside its own `handle` and logs any socket error
    there but a client gone with the error and its traceback ("Socket error processing
    request."): a client past the client timeout while its head is read is one warning
    line here, as one past it while its body is read or its answer written
    (`BalancedThreadWorker.handle_request`)."""

    SOCKET_ERROR = "Socket error processing request."

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BlockingIOError) and record.msg == self.SOCKET_ERROR:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = (
                "Closed a connection: its request's head did not come within %g s "
                "(GUNICORN_CLIENT_TIMEOUT)."
            )
            record.args = (self.seconds,)
            record.exc_info = record.exc_text = None
        return True


def _setting(
    name: str, default: float, parse: Callable[[str], float], what: str, most: float
) -> float:
    """The server setting `name` from the environment, from 0 to `most`; a bad one stops
    the process with its name (gunicorn.conf.py reads them before any worker starts)."""
    raw = os.environ.get(name, "").strip()
    try:
        value = parse(raw) if raw else default
    except ValueError:
        raise SystemExit(f"{name} must be {what}, not {raw!r}") from None
    if not 0 <= value <= most:  # NaN is neither
        raise SystemExit(f"{name} must be from 0 to {most:g}, not {raw}")
    return value


def linger_seconds() -> float:
    """How long a request thread keeps an idle kept-alive connection: `GUNICORN_LINGER_MS`
    (0 turns it off), a second by default, never more than the keep-alive itself."""
    return _setting("GUNICORN_LINGER_MS", 1000, int, "an integer", DAY_SECONDS * 1000) / 1000


def client_timeout_seconds() -> float | None:
    """How long a request thread waits on one client that neither sends the rest of its
    request nor reads its answer: `GUNICORN_CLIENT_TIMEOUT` (0 waits for ever), 30 s by
    default, a day at most. gthread's sockets block without a limit, so a client that
    stops reading a large answer (an export) or sending its body held a thread for good."""
    return _setting("GUNICORN_CLIENT_TIMEOUT", 30.0, float, "a number", DAY_SECONDS) or None


# The most either setting may be: the kernel's socket timeouts take far more, but a
# longer wait is "for ever" (0) in all but name.
DAY_SECONDS = 86400


class Board:
    """Connections held by each live worker, in shared memory: one slot per worker,
    claimed by its pid. Counts are written by their worker's main thread only and
    read without the lock (a word is read whole)."""

    def __init__(self, slots: int) -> None:
        self.pids = multiprocessing.RawArray(ctypes.c_long, slots)
        self.conns = multiprocessing.RawArray(ctypes.c_long, slots)
        self.lock: multiprocessing.synchronize.Lock = multiprocessing.Lock()

    def claim(self, pid: int) -> int | None:
        """A free slot for the worker `pid` (None when all are taken: it is gthread)."""
        with self.lock:
            for slot, holder in enumerate(self.pids):
                if holder in (0, pid):
                    self.pids[slot], self.conns[slot] = pid, 0
                    return slot
        return None

    def release(self, pid: int) -> None:
        with self.lock:
            for slot, holder in enumerate(self.pids):
                if holder == pid:
                    self.pids[slot], self.conns[slot] = 0, 0

    def counts(self) -> list[int]:
        return [self.conns[slot] for slot, pid in enumerate(self.pids) if pid]


BOARD: Board | None = None


def board_create(workers: int) -> Board:
    """Made by the master before it forks the workers; twice the slots, so a worker
    booting while the one it replaces is still being reaped finds a slot."""
    global BOARD
    BOARD = Board(2 * max(1, workers))
    return BOARD


def board_release(pid: int) -> None:
    if BOARD is not None:
        BOARD.release(pid)


class BalancedThreadWorker(ThreadWorker):
    _slot: int | None = None
    _nr_conns = 0
    _worker_connections = 0
    _max_keepalived = 0
    # A pipe holding one byte while request threads must not keep idle connections
    # (more connections than threads, or the worker stopping): they poll it too.
    _crowd: tuple[int, int] | None = None
    _crowded = False
    _linger = 0.0
    _client_timeout: float | None = None

    def init_process(self) -> None:
        if BOARD is not None:
            self._slot = BOARD.claim(self.pid)
        self._linger = min(linger_seconds(), float(self.cfg.keepalive))
        self._client_timeout = client_timeout_seconds()
        if self._client_timeout is not None:
            self.log.error_log.addFilter(HeadTimedOut(self._client_timeout))
        if self._linger > 0:
            self._crowd = os.pipe()
            for fd in self._crowd:
                os.set_blocking(fd, False)
        super().init_process()

    def _crowd_set(self, crowded: bool) -> None:
        """Main thread only (gthread changes its counts there, and signals run there)."""
        if self._crowd is None or crowded == self._crowded:
            return
        self._crowded = crowded
        if crowded:
            os.write(self._crowd[1], b"\0")
        else:
            os.read(self._crowd[0], 1)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self._crowd_set(True)

    # gthread's counters, as properties: the board sees every change of the count.

    @property
    def nr_conns(self) -> int:
        return self._nr_conns

    @nr_conns.setter
    def nr_conns(self, value: int) -> None:
        self._nr_conns = value
        if self._slot is not None and BOARD is not None:
            BOARD.conns[self._slot] = value
        if self.alive:
            self._crowd_set(value > self.cfg.threads)

    def _counts(self) -> list[int] | None:
        if self._slot is None or BOARD is None:
            return None
        counts = BOARD.counts()
        return counts if len(counts) > 1 else None

    @property
    def worker_connections(self) -> int:
        """Read by gthread's loop before each wait: it accepts while it holds fewer."""
        counts = self._counts()
        if counts is None:
            return self._worker_connections
        return min(self._worker_connections, math.ceil((sum(counts) + 1) / len(counts)))

    @worker_connections.setter
    def worker_connections(self, value: int) -> None:
        self._worker_connections = value

    @property
    def max_keepalived(self) -> int:
        """Read by a request thread before it answers: 0 closes the connection after
        this answer, which a worker holding more than its share does."""
        counts = self._counts()
        if counts is not None and self._nr_conns > math.ceil(sum(counts) / len(counts)):
            return 0
        return self._max_keepalived

    @max_keepalived.setter
    def max_keepalived(self, value: int) -> None:
        self._max_keepalived = value

    def wait_for_and_dispatch_events(self, timeout: float) -> Any:
        if not self._accepting and self._counts() is not None:
            timeout = min(timeout, RECHECK_SECONDS)
        return super().wait_for_and_dispatch_events(timeout)

    def handle(self, conn: TConn) -> Any:
        """gthread's, then the next requests of the same kept-alive connection in this
        thread while they come within the linger and nobody needs the thread.

        The client's socket waits at most `_client_timeout` for each read of the request
        (its head and its body) and each write of the answer: the kernel's own timeouts
        (SO_RCVTIMEO, SO_SNDTIMEO), set once a connection, under which a blocking read or
        write fails with EAGAIN (Python's socket timeout would poll before every read and
        write of every request)."""
        if self._client_timeout is not None and not getattr(conn, "client_timeout", False):
            seconds = int(self._client_timeout)
            limit = struct.pack("ll", seconds, int((self._client_timeout - seconds) * 1e6))
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            conn.client_timeout = True
        keep = super().handle(conn)
        while keep is True and not self._crowded and self._next_request(conn):
            keep = super().handle(conn)
        return keep

    def handle_request(self, req: Any, conn: TConn) -> Any:
        """gthread's; a client past the client timeout (`handle`) while its body is read or
        its answer written has the answer stopped (its iterator is closed, as for a client
        gone) and its connection closed, with one warning line. (Past it while its head is
        read, gthread's `handle` closes the connection and logs its error: `HeadTimedOut`.)"""
        try:
            return super().handle_request(req, conn)
        except TimeoutError as exc:
            # The application stopped its answer's stream (a download past its seconds,
            # memory/exportzip.py, which logged it): the connection is closed without the
            # answer's end, so the client sees it unfinished. (gthread re-raises an
            # OSError here, and would log it with its traceback.)
            self.log.debug("Closed the connection of %s mid-answer: %s", conn.client, exc)
            return False
        except BlockingIOError:
            self.log.warning(
                "Closed the connection of %s: it sent or read nothing for %g s "
                "(GUNICORN_CLIENT_TIMEOUT).",
                conn.client[0] if isinstance(conn.client, tuple) else conn.client,
                self._client_timeout,
            )
            return False

    def _next_request(self, conn: TConn) -> bool:
        """Whether `conn` has its next request (or end of stream) to read within the
        linger, before the worker gets crowded or stops."""
        if self._crowd is None:
            return False
        if conn.parser.unreader.buf.getvalue():
            return True  # already read ahead with the last body
        poller = select.poll()
        poller.register(conn.sock, select.POLLIN)
        poller.register(self._crowd[0], select.POLLIN)
        ready = poller.poll(self._linger * 1000)
        return any(fd != self._crowd[0] for fd, _ in ready) and not self._crowded
