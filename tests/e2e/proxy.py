"""A TCP proxy whose connections a test can cut: a real dropped connection mid-answer, or a
server that is down (its connections cut and new ones refused) until it is back."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to ``upstream``; ``cut()`` drops every open connection;
    ``down()`` cuts them and refuses new ones until ``up()``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._down = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> int:
        """Reset every connection now; returns how many were open."""
        with self._lock:
            sockets, self._open = self._open, set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(sockets) // 2

    def down(self) -> None:
        self._down = True
        self.cut()

    def up(self) -> None:
        self._down = False

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down:
                with contextlib.suppress(OSError):
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                client.close()  # a reset, as from a host with nothing listening
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        pair = {a: b, b: a}
        try:
            while True:
                readable, _, _ = select.select([a, b], [], [], 1.0)
                for src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    pair[src].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._open.discard(a)
                self._open.discard(b)
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()
