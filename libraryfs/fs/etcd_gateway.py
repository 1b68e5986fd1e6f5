"""A thin client for etcd's v3 JSON gateway (grpc-gateway, ``/v3/...``) over persistent HTTP/1.1 connections.

Why not ``etcd3gw``: it talks to one endpoint (no failover to the other members), opens watches without a
timeout and drops their errors in a worker thread, returns a bool from a range delete, builds prefix ends
with a UTF-8 decode (non-UTF-8 or 0xFF key bytes fail), and costs more per call than this module on
loopback (docs/scale-out.md, bench/etcd_kv.py). The wire format is etcd's own (rpc.proto through
grpc-gateway): bytes are base64, int64 fields are decimal strings, zero/false/empty fields are omitted.

Failure model (every call is bounded by ``timeout_s``):
- a connection refused/reset before the request is sent → the next member, at once;
- a member without quorum answers "request timed out"/"context deadline exceeded" after ~7 s, so each
  attempt has its own socket timeout (``attempt_timeout_s``) and the next member is tried;
- after the deadline → :class:`libraryfs.errors.Unavailable` (EIO), one line naming the endpoints;
- a write whose request was sent but whose answer was lost raises :class:`Ambiguous`: the caller must find
  out whether it committed (etcd_backend does, with its per-writer commit marker).
"""

from __future__ import annotations

import base64
import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from libraryfs import errors

#: gRPC status codes the gateway reports in {"code": N} (google.golang.org/grpc/codes).
CODE_INVALID_ARGUMENT, CODE_NOT_FOUND, CODE_RESOURCE_EXHAUSTED, CODE_OUT_OF_RANGE = 3, 5, 8, 11
RETRYABLE_CODES = {
    1,
    2,
    4,
    10,
    14,
}  # canceled, unknown ("context deadline exceeded"), deadline, aborted, unavail


def b64(data: bytes) -> str:
    """base64 text of ``data`` (the gateway's encoding of bytes fields)."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    """bytes of a base64 field; an omitted field is empty."""
    return base64.b64decode(text) if text else b""


class Ambiguous(Exception):
    """A write was sent but its outcome is unknown (connection lost or server timeout after sending)."""


class FutureRevision(Exception):
    """A serializable read asked a member for a revision it has not applied yet."""


class LeaseNotFound(Exception):
    """The lease id is unknown to etcd (expired or revoked)."""


def _classify(status: int, body: bytes) -> tuple[int, str]:
    try:
        d = json.loads(body)
        return int(d.get("code", 0)), str(d.get("error") or d.get("message") or body[:200])
    except ValueError:
        return 0, f"HTTP {status}: {body[:200]!r}"


#: bound on one call, failover between members and backoff included (s): without quorum a call (so a request
#: of a mount) fails with Unavailable (EIO) after this long; the default of every etcd client here
TIMEOUT_S = 10.0


class Gateway:
    """A client of one etcd cluster's JSON gateway: ``call(path, body)`` → response dict.

    ``endpoints``: ["host:port", ...] (client URLs of the members); ``timeout_s``: bound on one call
    including failover and backoff; ``attempt_timeout_s``: socket timeout of one HTTP attempt. Thread-safe:
    each thread keeps its own persistent connection per member (http.client connections are not shared).
    """

    def __init__(
        self, endpoints: list[str], *, timeout_s: float = TIMEOUT_S, attempt_timeout_s: float = 3.0
    ) -> None:
        if not endpoints:
            raise errors.InvalidArgument("no etcd endpoints given")
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        self.attempt_timeout_s = attempt_timeout_s
        self._preferred = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        self._closed = False
        self._all: list[dict] = []  # every thread's connections, for close()
        self.calls = 0  # requests sent (benchmarks read it)

    # -- connections -------------------------------------------------------------------------------
    def _conn(self, idx: int) -> http.client.HTTPConnection:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
            with self._lock:
                self._all.append(conns)
        c = conns.get(idx)
        if c is None:
            c = conns[idx] = self._new_conn(idx)
        return c

    def _new_conn(self, idx: int) -> http.client.HTTPConnection:
        host, _, port = self.endpoints[idx].rpartition(":")
        return http.client.HTTPConnection(host.strip("[]"), int(port), timeout=self.attempt_timeout_s)

    def _drop(self, idx: int) -> None:
        c = getattr(self._local, "conns", {}).pop(idx, None)
        if c is not None:
            c.close()

    def close(self) -> None:
        """Close every connection of every thread."""
        self._closed = True
        with self._lock:
            for conns in self._all:
                for c in list(conns.values()):
                    c.close()
                conns.clear()

    def _rotate(self, idx: int) -> None:
        with self._lock:
            if self._preferred == idx:
                self._preferred = (idx + 1) % len(self.endpoints)

    # -- calls ---------------------------------------------------------------------------------------
    def call(
        self, path: str, body: dict[str, Any], *, idempotent: bool = True, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """POST ``body`` (JSON) to ``/v3/<path>`` on a healthy member; the decoded JSON answer.

        Raises Unavailable (no member answered within ``timeout_s``), Ambiguous (a non-idempotent request
        was sent and its answer lost), NoSpace (quota exceeded, etcd alarm NOSPACE), FileTooBig (over
        --max-txn-ops or --max-request-bytes), Compacted, FutureRevision, LeaseNotFound, InvalidArgument.
        """
        payload = json.dumps(body).encode()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        last = "no attempt"
        tries = 0
        while True:
            idx = self._preferred
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                eps = ",".join(self.endpoints)
                raise errors.Unavailable(
                    f"etcd cluster {eps} unavailable: {last} "
                    f"(gave up after {self.timeout_s if timeout_s is None else timeout_s:g} s)"
                )
            sent = False
            try:
                c = self._conn(idx)
                c.timeout = min(self.attempt_timeout_s, max(remaining, 0.05))
                if c.sock is None:
                    c.connect()
                else:
                    c.sock.settimeout(c.timeout)
                sent = True
                c.request("POST", "/v3/" + path, body=payload, headers={"Content-Type": "application/json"})
                self.calls += 1
                r = c.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                self._drop(idx)
                last = f"{self.endpoints[idx]}: {type(e).__name__}: {e}".rstrip(": ")
                if sent and not idempotent and not isinstance(e, ConnectionRefusedError):
                    raise Ambiguous(last) from None
                self._rotate(idx)
                tries += 1
                self._backoff(tries, deadline)
                continue
            if r.status == 200:
                return json.loads(data) if data else {}
            code, msg = _classify(r.status, data)
            last = f"{self.endpoints[idx]}: {msg}"
            if code in RETRYABLE_CODES or r.status in (502, 503, 504):
                if not idempotent:
                    raise Ambiguous(last)
                self._rotate(idx)
                tries += 1
                self._backoff(tries, deadline)
                continue
            raise self._error(code, msg)

    @staticmethod
    def _error(code: int, msg: str) -> Exception:
        if code == CODE_RESOURCE_EXHAUSTED:
            return errors.NoSpace(
                f"etcd quota exhausted ({msg}): compact and defragment the cluster, "
                "then disarm the NOSPACE alarm, or raise --quota-backend-bytes"
            )
        if code == CODE_OUT_OF_RANGE and "compacted" in msg:
            return errors.Compacted(f"etcd revision was compacted ({msg})")
        if code == CODE_OUT_OF_RANGE and "future" in msg:
            return FutureRevision(msg)
        if code == CODE_NOT_FOUND and "lease" in msg:
            return LeaseNotFound(msg)
        if code == CODE_INVALID_ARGUMENT and ("too many operations" in msg or "too large" in msg):
            return errors.FileTooBig(
                f"transaction exceeds etcd's limits ({msg}; --max-txn-ops, " "--max-request-bytes)"
            )
        if code == CODE_INVALID_ARGUMENT:
            return errors.InvalidArgument(f"etcd rejected the request: {msg}")
        return errors.Unavailable(f"etcd error: {msg}")

    @staticmethod
    def _backoff(tries: int, deadline: float) -> None:
        # first round over the members at once; then exponential backoff with jitter, capped at 0.5 s
        if tries < 2:
            return
        delay = min(0.5, 0.02 * 2 ** min(tries, 8)) * (0.5 + random.random() / 2)
        time.sleep(max(0.0, min(delay, deadline - time.monotonic())))

    # -- watch stream ------------------------------------------------------------------------------
    def stream(
        self, path: str, body: dict[str, Any], *, idle_timeout_s: float | None = None
    ) -> tuple[http.client.HTTPConnection, Iterator[dict[str, Any]]]:
        """Open a streaming call (watch) on the preferred member: (connection, iterator of messages).

        The request carries gRPC metadata ``hasleader=true`` so a member that loses its leader ends the
        stream instead of going silent. TCP keepalive detects a dead peer host. Close the connection
        (from any thread) to stop the iterator. Raises Unavailable when no member accepts the stream.
        """
        deadline = time.monotonic() + self.timeout_s
        last = "no attempt"
        tries = 0
        while time.monotonic() < deadline and not self._closed:
            idx = self._preferred
            c = self._new_conn(idx)
            try:
                c.connect()
                _keepalive(c.sock)
                c.request(
                    "POST",
                    "/v3/" + path,
                    body=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", "Grpc-Metadata-hasleader": "true"},
                )
                r = c.getresponse()
                if r.status != 200:
                    raise OSError(_classify(r.status, r.read())[1])
                c.sock.settimeout(idle_timeout_s)
                return c, _lines(r)
            except (OSError, http.client.HTTPException) as e:
                c.close()
                last = f"{self.endpoints[idx]}: {e}"
                self._rotate(idx)
                tries += 1
                self._backoff(tries, deadline)
        raise errors.Unavailable(f"etcd cluster {','.join(self.endpoints)} unavailable for a watch: {last}")


def _keepalive(sock: socket.socket | None) -> None:
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, val in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)


def _lines(r: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    # grpc-gateway streams one JSON object per line: {"result": {...}} or {"error": {...}}
    while True:
        line = r.readline()
        if not line:
            return
        if line.strip():
            yield json.loads(line)
