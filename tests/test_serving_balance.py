"""The shipped server spreads kept-alive connections over its workers
(memoryadmin/serving.py): a real gunicorn with gunicorn.conf.py, real sockets, and
each worker's connections read from /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from tests.helpers import GUNICORN, ROOT, clean_env, free_port, production_env, wait_until_up

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


class KeptAlive:
    """One client's HTTP/1.1 connection, opened again when the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.opened = 0

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
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(lines[0].split()[1])


def connections_by_worker(master: int, port: int) -> dict[int, int]:
    """Established connections to `port` held by each worker process of `master`."""
    established = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
            established.add(f"socket:[{fields[9]}]")
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
                count += os.readlink(f"/proc/{pid}/fd/{fd}") in established
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
