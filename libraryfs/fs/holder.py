"""Holders across hosts: the read-write mounts and the one indexer of a library whose store is shared (etcd).

A library directory's ``flock`` locks (``mount.lock``, ``indexer.lock``: :mod:`libraryfs.layout`) exclude
processes of one host. When the store is on etcd, several library directories on several hosts name one
library, so the mount server and the indexer also hold a named **etcd lease** (``acquire_lease``: a key
bound to a lease of ``ttl_s`` seconds, renewed by a thread every ``ttl_s / 3``). A holder killed with
``kill -9`` loses it when the TTL runs out; a holder on this host whose process is gone is waited for (up to
the TTL) instead of refused. On LMDB there is nothing to hold: the flock already excludes every other holder.

**Mounts**: every read-write mount holds its own lease, named by :func:`mount_lease_name` (``mount/`` + host
+ ``:`` + library directory), so any number of hosts mount one library read-write and :func:`mount_holders`
lists them all (``status``; ``check --repair`` refuses while there is one). Work that must run while no other
mount serves — the check after an unclean stop, the purge of orphaned inodes — runs under the single lease
:data:`RECOVERY_LEASE` and only when :func:`mount_holders` names no other mount (``libraryfs.daemon.mountd``).
The **indexer** lease stays single: one active indexer across hosts.

**Standby** (the indexer daemon): :meth:`Holder.wait_take` does not refuse a live holder; it polls the lease
key every ``ttl_s / 5`` seconds (one range read; no busy loop) until the key is gone, then takes it. A holder
killed with ``kill -9`` stops renewing, so its key expires at most ``ttl_s`` after its last renewal and the
standby holds the lease within ``ttl_s + ttl_s / 5`` (12 s with the default TTL). While it waits, the standby
says so in ``<state dir>/indexer-standby.json`` (:func:`write_standby`, read by :func:`standby_facts`): what
``libraryfs status`` and ``/.libraryfs/status.json`` of that library directory show as ``standby``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable

from libraryfs.errors import Busy, Unavailable
from libraryfs.layout import pid_alive, state_dir

log = logging.getLogger("libraryfs.holder")
TTL_S = 10  #: lease TTL: how long a killed holder keeps the library (etcd's minimum is 5 s)
STANDBY_FILE = "indexer-standby.json"  #: in :func:`~libraryfs.layout.state_dir`: this host's waiting indexer


MOUNT_LEASE_PREFIX = "mount/"  #: the leases of read-write mounts: ``mount/<host>:<library directory>``
RECOVERY_LEASE = "mount-recovery"  #: held while a starting mount checks the store and purges orphans


def _hostname() -> str:
    """This host's name (``socket.gethostname()``; socket imported here: ``status`` on LMDB never asks)."""
    import socket

    return socket.gethostname()


def mount_lease_name(libdir: str) -> str:
    """The lease name of this host's read-write mount of ``libdir`` (absolute path; one per directory: the
    directory's ``mount.lock`` flock excludes a second one on this host)."""
    return f"{MOUNT_LEASE_PREFIX}{_hostname()}:{os.path.abspath(libdir)}"


def mount_holders(backend, *, skip: str | None = None) -> list[dict]:
    """The facts (``host``, ``pid``, ``mountpoint``, ``libdir``) of every live read-write mount of the
    library on ``backend``, ordered by lease name (``skip``: a lease name left out); ``[]`` on a backend
    without leases (LMDB). A lease of this host whose process is gone does not count: a killed server's
    lease runs out only within the TTL, and so does a stopped server's whose revoke was lost (etcd slow to
    answer under load: :meth:`Holder.release`)."""
    get = getattr(backend, "lease_holders", None)
    if get is None:
        return []
    host = _hostname()
    out = [_facts(raw) for name, raw in sorted(get(MOUNT_LEASE_PREFIX).items()) if name != skip]
    return [f for f in out if f.get("host") != host or pid_alive(int(f.get("pid") or 0))]


def other_mounts(backend, libdir: str) -> list[dict]:
    """:func:`mount_holders` except this host's mount of ``libdir`` (its own lease)."""
    return mount_holders(backend, skip=mount_lease_name(libdir))


def _facts(raw: bytes) -> dict:
    """A lease value (JSON facts) as a dict; ``{"host": "?", "pid": 0}`` when it is not one."""
    try:
        facts = json.loads(raw)
    except ValueError:
        return {"host": "?", "pid": 0}
    return facts if isinstance(facts, dict) else {"host": "?", "pid": 0}


def holder_facts(backend, name: str) -> dict | None:
    """``{"host", "pid", ...}`` of the live holder of lease ``name`` on ``backend``, or None (none, or a
    backend without leases)."""
    get = getattr(backend, "lease_holder", None)
    raw = get(name) if get is not None else None
    return None if raw is None else _facts(raw)


def describe_holder(facts: dict) -> str:
    """``host H (pid P)[ at MOUNTPOINT]`` for messages."""
    at = f" at {facts['mountpoint']}" if facts.get("mountpoint") else ""
    return f"host {facts.get('host', '?')} (pid {facts.get('pid', '?')}){at}"


class Holder:
    """The held lease ``name`` of one process (see the module docstring); :meth:`release` gives it up.

    ``Holder.take(backend, name, facts)`` returns None on a backend without leases (LMDB). Raises
    :class:`Busy` naming the live holder (``what`` says what is held: "mounted", "indexed")."""

    def __init__(self, lease, name: str, ttl_s: int, on_lost: Callable[[], None] | None = None) -> None:
        self.lease, self.name, self.ttl_s, self.on_lost = lease, name, ttl_s, on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"libraryfs-lease-{name}", daemon=True)
        self._thread.start()

    @classmethod
    def take(
        cls,
        backend,
        name: str,
        facts: dict,
        what: str,
        ttl_s: int = TTL_S,
        on_lost: Callable[[], None] | None = None,
    ) -> Holder | None:
        """Acquire lease ``name`` (waiting out a dead holder of this host); ``on_lost()`` runs (in the
        renewal thread) if the lease ever expires under us. See the class docstring."""
        acquire = getattr(backend, "acquire_lease", None)
        if acquire is None:
            return None
        me = {"host": _hostname(), "pid": os.getpid(), **facts}
        deadline = time.monotonic() + ttl_s + 2
        while True:
            lease = acquire(name, ttl_s, json.dumps(me).encode())
            if lease is not None:
                return cls(lease, name, ttl_s, on_lost)
            other = holder_facts(backend, name) or {}
            dead_here = other.get("host") == me["host"] and not pid_alive(int(other.get("pid") or 0))
            if other and not dead_here or time.monotonic() > deadline:
                raise Busy(f"the library is already {what} on {describe_holder(other)} (etcd lease {name!r})")
            time.sleep(0.5)  # a killed holder of this host: its lease ends within the TTL

    @classmethod
    def wait_take(
        cls,
        backend,
        name: str,
        facts: dict,
        stop: threading.Event,
        on_standby: Callable[[dict], None] | None = None,
        ttl_s: int = TTL_S,
        on_lost: Callable[[], None] | None = None,
        on_poll: Callable[[], None] | None = None,
    ) -> Holder | None:
        """Acquire lease ``name``, waiting as a standby for as long as another process holds it (see the module
        docstring): ``on_standby(holder_facts)`` runs once when the first attempt finds it held. Polls every
        ``ttl_s / 5`` seconds, calling ``on_poll()`` (a heartbeat) each time; an unreachable cluster
        (:class:`~libraryfs.errors.Unavailable`) is waited out too. Returns None on a backend without leases or when ``stop`` is set first; the
        backend's errors (:class:`~libraryfs.errors.Unavailable`) propagate."""
        acquire = getattr(backend, "acquire_lease", None)
        if acquire is None:
            return None
        value = json.dumps({"host": _hostname(), "pid": os.getpid(), **facts}).encode()
        told = False
        while not stop.is_set():
            try:
                lease = acquire(name, ttl_s, value)
                if lease is not None:
                    return cls(lease, name, ttl_s, on_lost)
                if not told and on_standby is not None:
                    on_standby(holder_facts(backend, name) or {})
                told = True
            except Unavailable as e:  # the cluster lost its quorum: keep standing by until it is back
                log.warning("standby: waiting for the etcd cluster: %s", e)
            if on_poll is not None:
                on_poll()
            stop.wait(ttl_s / 5)
        return None

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if not self.lease.keepalive():
                    log.error("lost the etcd lease %r (expired): another process may hold it now", self.name)
                    if self.on_lost is not None:
                        self.on_lost()
                    return
            except Exception as e:  # the cluster is unreachable: retry until the TTL decides
                log.warning("renewing the etcd lease %r failed: %s", self.name, e)

    def release(self) -> None:
        """Stop renewing and revoke the lease (its key goes at once). Idempotent. A revoke etcd did not
        answer in time is logged: the key then stays until the TTL runs out (:func:`mount_holders` does not
        count it once this process is gone)."""
        self._stop.set()
        self._thread.join(5)
        if not self.lease.release():
            log.warning(
                "could not revoke the etcd lease %r: it ends within its TTL (%d s)", self.name, self.ttl_s
            )


def _standby_path(libdir: str) -> str:
    return os.path.join(state_dir(libdir), STANDBY_FILE)


def write_standby(libdir: str, active: dict) -> None:
    """Record that this process is ``libdir``'s standby indexer, waiting for ``active`` (the holder's facts)."""
    doc = {"state": "standby", "pid": os.getpid(), "since": time.time(), "active": active}
    path = _standby_path(libdir)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def clear_standby(libdir: str) -> None:
    """Remove this library directory's standby record (missing is fine)."""
    try:
        os.unlink(_standby_path(libdir))
    except OSError:
        pass


def standby_facts(libdir: str) -> dict | None:
    """``{"state": "standby", "pid", "since", "active": {...}}`` when a live process of this library directory
    waits for the indexer lease held elsewhere, else None (no record, or its process is gone)."""
    try:
        with open(_standby_path(libdir)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and pid_alive(int(doc.get("pid") or 0)) else None
