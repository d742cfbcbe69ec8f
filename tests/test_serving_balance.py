"""The shipped worker (memoryadmin/serving.py) spreads kept-alive connections over its
workers, and keeps a kept-alive connection in its request thread between requests
while no other connection needs the thread: a real gunicorn (with gunicorn.conf.py,
or with the worker alone and tests/serving_app.py), real sockets, and each worker's
connections read from /proc."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    GUNICORN,
    ROOT,
    clean_env,
    free_port,
    production_env,
    wait_until,
    wait_until_up,
)

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


class KeptAlive:
    """One client's HTTP/1.1 connection, opened again when the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.opened = 0
        self.body = b""

    def open(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.opened += 1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def get(self, path: str) -> int:
        if self.sock is None:
            self.open()
        assert self.sock is not None
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection before answering"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        length = int(headers["content-length"])
        while len(body) < length:
            body += self.sock.recv(65536)
        self.body = body
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(lines[0].split()[1])


ESTABLISHED, CLOSE_WAIT = "01", "08"


def connections_by_worker(
    master: int, port: int, states: tuple[str, ...] = (ESTABLISHED,)
) -> dict[int, int]:
    """Connections to `port` in `states` (/proc/net/tcp's codes; established by default)
    held by each worker process of `master`. A connection its client closed stays in
    CLOSE_WAIT, still held, until the worker has seen the end of it and closed it too."""
    sockets = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] in states:
            sockets.add(f"socket:[{fields[9]}]")
    held = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if int(stat.rpartition(")")[2].split()[1]) != master:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except (FileNotFoundError, ProcessLookupError):
            continue
        count = 0
        for fd in fds:
            with contextlib.suppress(OSError):
                count += os.readlink(f"/proc/{pid}/fd/{fd}") in sockets
        held[pid] = count
    return held


def test_four_kept_alive_clients_end_up_two_on_each_of_two_workers(tmp_path: Path) -> None:
    """Clients that connect at once all land on the worker that accepts first under
    plain gthread (one process doing all the work); here each worker ends up with its
    share, and every request is answered: a client told `Connection: close` reconnects."""
    port = free_port()
    env = clean_env(
        **{
            **production_env(),
            "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
            "GUNICORN_BIND": f"127.0.0.1:{port}",
            "WEB_CONCURRENCY": "2",
            "GUNICORN_THREADS": "4",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        }
    )
    clients = [KeptAlive(port) for _ in range(4)]
    process = subprocess.Popen(
        [GUNICORN, "--config", "gunicorn.conf.py"], cwd=ROOT, env=env, text=True
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/healthz", process)
        ready = threading.Barrier(4)

        def connect(client: KeptAlive) -> None:
            ready.wait()
            client.open()

        threads = [threading.Thread(target=connect, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        statuses = [client.get("/healthz") for _ in range(20) for client in clients]
        assert statuses == [200] * 80
        held = connections_by_worker(process.pid, port)
        assert sorted(held.values()) == [2, 2], held
        # Balanced, nobody is sent away again: the same four connections keep serving.
        opened = [client.opened for client in clients]
        assert [client.get("/healthz") for _ in range(10) for client in clients] == [200] * 40
        assert [client.opened for client in clients] == opened
    finally:
        for client in clients:
            client.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


@contextlib.contextmanager
def counting_server(
    *, threads: int, linger_ms: int, client_timeout: str = "", log: Path | None = None
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """One worker of the shipped class (counting hand-backs) serving tests/serving_app.py
    with `threads` request threads, a 30 s keep-alive, `GUNICORN_LINGER_MS` and
    `GUNICORN_CLIENT_TIMEOUT`; its log to `log` if given."""
    port = free_port()
    command = [
        # Not gunicorn.conf.py (read from the checkout by default): the test app's settings.
        *(GUNICORN, "--config", "python:tests.serving_app"),
        *("--workers", "1", "--threads", str(threads)),
        *("--keep-alive", "30"),
        *("--worker-class", "tests.serving_app.CountingWorker"),
        *("--bind", f"127.0.0.1:{port}", "tests.serving_app:app"),
    ]
    env = clean_env(GUNICORN_LINGER_MS=str(linger_ms), GUNICORN_CLIENT_TIMEOUT=client_timeout)
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(log.open("w")) if log is not None else None
        process = subprocess.Popen(command, cwd=ROOT, env=env, text=True, stderr=stderr)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/", process)
        yield process, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def handed_back(client: KeptAlive) -> int:
    assert client.get("/") == 200
    count: int = json.loads(client.body)["handedBack"]
    return count


def hand_backs_over_twenty_requests(linger_ms: int) -> list[int]:
    """Twenty requests on one connection, each sent after the last answer: how many
    times the connection had been handed back to the main thread before each."""
    with counting_server(threads=2, linger_ms=linger_ms) as (server, port):
        client = KeptAlive(port)
        handed_back(client)

        def only_ours() -> bool:
            held = connections_by_worker(server.pid, port, (ESTABLISHED, CLOSE_WAIT))
            return sum(held.values()) == 1

        # The start-up probe's connection, closed by the probe, is closed by the worker
        # too (the hand-back that ends it counted) before the counting starts: a
        # connection in CLOSE_WAIT is one the worker has yet to see end.
        wait_until(only_ours, "the worker to close the probe's connection")
        first = handed_back(client)
        counts = [handed_back(client) - first for _ in range(20)]
        client.close()
    assert client.opened == 1
    return counts


def test_a_kept_alive_connection_stays_with_its_thread_between_requests() -> None:
    """The request thread serves them all without handing the connection back to the
    main thread, which plain gthread does after every answer (GUNICORN_LINGER_MS=0)."""
    assert hand_backs_over_twenty_requests(20_000) == [0] * 20
    assert hand_backs_over_twenty_requests(0) == list(range(1, 21))


def test_a_lingering_thread_makes_way_for_a_connection_without_one() -> None:
    """One request thread, kept by the first client's idle connection for up to 20 s: a
    second client's request is answered at once, and both connections go on serving."""
    with counting_server(threads=1, linger_ms=20_000) as (_, port):
        first, second = KeptAlive(port), KeptAlive(port)
        handed_back(first)
        started = time.monotonic()
        handed_back(second)
        assert time.monotonic() - started < 5
        for _ in range(3):
            handed_back(first)
            handed_back(second)
        assert (first.opened, second.opened) == (1, 1)
        first.close()
        second.close()


def test_a_stopping_worker_does_not_wait_for_a_lingering_thread() -> None:
    """SIGTERM with a connection idle in its request thread (a 20 s linger): the worker
    stops within gthread's own grace for kept-alive connections (2 s), not the linger."""
    with counting_server(threads=2, linger_ms=20_000) as (server, port):
        client = KeptAlive(port)
        handed_back(client)
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        wait_until(lambda: server.poll() is not None, "gunicorn to stop", seconds=30)
        assert time.monotonic() - started < 10
        client.close()


def _stalled_client(port: int, request: bytes) -> socket.socket:
    """A client that sends `request` and then neither sends nor reads anything more (its
    receive buffer the smallest the system allows)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def _closed_by_server(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (what it had sent is read)."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not sock.recv(1 << 20):
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /body HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nsome of it",
        b"GET /large HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: 127.0",
    ],
    ids=["stops-sending-its-body", "stops-reading-the-answer", "stops-sending-its-head"],
)
def test_a_client_that_stalls_holds_its_thread_only_for_the_client_timeout(
    request_bytes: bytes, tmp_path: Path
) -> None:
    """One request thread. A client that stops sending its request's head or body, or
    stops reading a large answer, is cut off after GUNICORN_CLIENT_TIMEOUT (2 s here): the
    thread is free for the next client, and an answer cut off is closed as for a client
    gone; the log says so in one warning line, without a traceback.
    gthread's sockets block without a limit: before, the thread was held for good."""
    log = tmp_path / "gunicorn.log"
    with counting_server(threads=1, linger_ms=0, client_timeout="2", log=log) as (_, port):
        stalled = _stalled_client(port, request_bytes)
        time.sleep(0.5)  # the thread has taken the stalled request
        started = time.monotonic()
        other = KeptAlive(port)
        assert other.get("/") == 200
        waited = time.monotonic() - started
        assert 1 < waited < 15, waited
        other.close()
        assert _closed_by_server(stalled, 15)
        stalled.close()
        if b"/large" in request_bytes:
            again = KeptAlive(port)
            assert again.get("/") == 200
            assert json.loads(again.body)["answersClosed"] == 1
            again.close()
    logged = log.read_text()
    assert "Traceback" not in logged, logged
    expected = (
        "[WARNING] Closed a connection: its request's head did not come within 2 s"
        if b"\r\n\r\n" not in request_bytes  # its head never ended
        else "[WARNING] Closed the connection of 127.0.0.1: it sent or read nothing for 2 s"
    )
    assert logged.count(expected) == 1, logged


def test_a_client_timeout_of_zero_waits_for_ever_and_a_bad_one_stops_the_server() -> None:
    with counting_server(threads=1, linger_ms=0, client_timeout="0") as (_, port):
        stalled = _stalled_client(
            port, b"POST /body HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9\r\n\r\nsome"
        )
        assert not _closed_by_server(stalled, 4)
        stalled.sendall(b"thing")  # the rest: the body is read and answered
        stalled.settimeout(10)
        answer = b""
        while b'{"read": 9}' not in answer:
            chunk = stalled.recv(65536)
            assert chunk, answer
            answer += chunk
        stalled.close()
    port = free_port()
    refused = subprocess.run(
        # gunicorn.conf.py checks it before any worker starts.
        [
            GUNICORN,
            "--config",
            "gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "tests.serving_app:app",
        ],
        cwd=ROOT,
        env=clean_env(GUNICORN_CLIENT_TIMEOUT="soon"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "GUNICORN_CLIENT_TIMEOUT must be a number, not 'soon'" in refused.stderr


def test_an_answer_its_application_stops_ends_the_connection_unfinished(tmp_path: Path) -> None:
    """A download past its seconds stops its stream (memory/exportzip.py): the client
    sees the answer unfinished (no end of its chunks) and the server logs no traceback."""
    log = tmp_path / "gunicorn.log"
    with counting_server(threads=1, linger_ms=0, log=log) as (_, port):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /stopped HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        sock.settimeout(10)
        while chunk := sock.recv(65536):
            received += chunk
        sock.close()
        assert b"200 OK" in received
        assert b"part of it" in received
        assert not received.endswith(b"0\r\n\r\n")  # chunked, and never ended
        again = KeptAlive(port)
        assert again.get("/") == 200
        again.close()
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.mark.parametrize("raw", ["inf", "nan", "1e20", "-1", "86401"])
def test_a_client_timeout_out_of_its_range_stops_the_server(raw: str, monkeypatch: Any) -> None:
    """Each is a number, but none a socket's timeout can take (the kernel's `timeval`):
    every connection would have failed in its worker, silently."""
    from memoryadmin import serving

    monkeypatch.setenv("GUNICORN_CLIENT_TIMEOUT", raw)
    says = f"GUNICORN_CLIENT_TIMEOUT must be from 0 to 86400, not {raw}$"
    with pytest.raises(SystemExit, match=says):
        serving.client_timeout_seconds()
    monkeypatch.setenv("GUNICORN_CLIENT_TIMEOUT", "86400")
    assert serving.client_timeout_seconds() == 86400
