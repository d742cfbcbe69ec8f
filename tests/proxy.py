"""A TCP proxy on loopback that a test can cut and restore: a real database outage for
one server, without touching the database server others use."""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.servers import free_port


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._server: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        """Listens again on the same port."""
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        """Stops listening (new connections are refused) and breaks every open connection."""
        assert self._server is not None
        self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._server = None
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            self._close(sock)

    def close(self) -> None:
        if self._server is not None:
            self.cut()

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                self._close(client)
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close(source)
            self._close(sink)
