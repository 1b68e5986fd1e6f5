"""A TCP proxy on loopback that can lose one HTTP exchange on purpose, for commit-outcome tests.

``LossyProxy(upstream_host, upstream_port)`` listens on 127.0.0.1:<free port> (``.endpoint``) and forwards
bytes both ways. ``arm(marker, lose)`` makes it cut the client connection the next time a request
containing ``marker`` passes: ``lose="request"`` before forwarding it (never applied), ``lose="response"``
after the server answered (applied, answer lost) — the two halves of an unknown commit outcome.
"""

from __future__ import annotations

import socket
import threading


class LossyProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._armed: tuple[bytes, str] | None = None
        self._lock = threading.Lock()
        self.lost = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, marker: bytes, lose: str) -> None:
        with self._lock:
            self._armed = (marker, lose)

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            cut = threading.Event()
            threading.Thread(target=self._up, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, cut), daemon=True).start()

    def _take(self, data: bytes) -> str | None:
        with self._lock:
            if self._armed and self._armed[0] in data:
                lose = self._armed[1]
                self._armed = None
                self.lost += 1
                return lose
        return None

    def _up(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        while data := _recv(client):
            lose = self._take(data)
            if lose == "request":
                break
            if lose == "response":
                cut.set()  # before sending: the answer may come back before the next statement runs
            server.sendall(data)
        _close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        while data := _recv(server):
            if cut.is_set():
                break
            client.sendall(data)
        _close(client, server)


def _recv(s: socket.socket) -> bytes:
    try:
        return s.recv(1 << 16)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
