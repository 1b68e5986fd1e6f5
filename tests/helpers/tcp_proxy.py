"""A TCP proxy on loopback that can lose one HTTP exchange on purpose, for commit-outcome tests.

``LossyProxy(upstream_host, upstream_port)`` listens on 127.0.0.1:<free port> (``.endpoint``) and forwards
bytes both ways. ``arm(marker, lose)`` makes it cut the client connection the next time a request
containing ``marker`` passes: ``lose="request"`` before forwarding it (never applied), ``lose="response"``
after the server answered (applied, answer lost) — the two halves of an unknown commit outcome.

``close()`` wakes every thread blocked on one of its sockets (``shutdown``) and joins it *before* closing the
sockets. A thread left blocked in ``accept``/``recv`` on a closed descriptor is a hazard: when the kernel
restarts that system call (after a SIGSTOP/SIGCONT, a ptrace attach, a cgroup freeze) it looks the
descriptor *number* up again — and by then it may name another socket. This proxy's accept thread, left
blocked by a ``close()`` that only closed the listening socket, went on accepting a later test's connections
to the scripted LLM server (whose descriptor had the same number) and forwarded them to etcd, which answered
404 (CI failures of test_code_supervisor.py; a hung LLMServer.stop under a CPU hog).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class LossyProxy:
    """The proxy; every thread it starts has ended when :meth:`close` returns."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        """Listen on 127.0.0.1:<free port> and forward each connection to ``upstream_host:upstream_port``."""
        self.upstream = (upstream_host, upstream_port)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._armed: tuple[bytes, str] | None = None
        self._lock = threading.Lock()
        self._closing = False
        self._conns: list[socket.socket] = []
        self.threads: list[threading.Thread] = []  #: every thread started (accept, then two per connection)
        self.lost = 0
        self._start(self._accept)

    def arm(self, marker: bytes, lose: str) -> None:
        """Cut the next exchange whose request contains ``marker`` (``lose``: ``"request"`` or ``"response"``)."""
        with self._lock:
            self._armed = (marker, lose)

    def close(self) -> None:
        """Stop accepting, end every forwarded connection and join every thread, then close the sockets."""
        with self._lock:
            self._closing = True
            conns = list(self._conns)
        for s in (self.sock, *conns):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept (EINVAL) or recv (EOF)
        for t in list(self.threads):
            t.join(10)
        for s in (self.sock, *conns):
            s.close()

    def _start(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(t)
        t.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closing:
                    client.close()
                    server.close()
                    return
                self._conns += [client, server]
                cut = threading.Event()
                self._start(self._up, client, server, cut)
                self._start(self._down, server, client, cut)

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
            if not _send(server, data):
                break
        _shutdown(client, server)

    def _down(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        while data := _recv(server):
            if cut.is_set():
                break
            if not _send(client, data):
                break
        _shutdown(client, server)


def _recv(s: socket.socket) -> bytes:
    try:
        return s.recv(1 << 16)
    except OSError:
        return b""


def _send(s: socket.socket, data: bytes) -> bool:
    try:
        s.sendall(data)
        return True
    except OSError:  # the other side ended (or close() shut it down)
        return False


def _shutdown(*socks: socket.socket) -> None:
    """End both directions of a forwarded pair: the other thread's ``recv`` returns EOF and that thread
    ends. The sockets are closed by :meth:`LossyProxy.close`, after every thread has been joined."""
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
