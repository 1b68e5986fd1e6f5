"""Kernel cache invalidation from another host's writes: a watch of the journal of a shared (etcd) store.

Every mount of an etcd library serves writes made by the read-write mounts of other hosts
(docs/scale-out.md). Without help its kernel keeps stale attributes and pages until the attribute timeout,
and with ``auto_inval_data`` re-reads a file only once it sees a new mtime or size. :class:`JournalInvalidator`
watches the ``journal`` table from the revision the mount started at (etcd ``watch``; events in commit
order) and, for every record another process appends (a read-write mount skips its own commits by their
revision: ``committed_here``), drops the kernel's cached attributes and pages of
the entry and of its directory (libfuse ``fuse_invalidate_path``; a rename: both names; a write, whose record
names only the inode: every path this mount served that inode under, remembered from its getattr calls). A path the kernel
has not cached answers ENOENT, which is fine. libfuse's high-level API cannot drop a *negative* dentry
(``fuse_lowlevel_notify_inval_entry`` needs its private node ids), so a name looked up before it was created
stays invisible for up to the negative timeout. A compacted or broken watch restarts from the current
revision: what it missed is bounded by the kernel's timeouts, as without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from libraryfs.errors import LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store

log = logging.getLogger("libraryfs.remote_inval")
MAX_TRACKED = 100_000  #: inodes whose served paths are remembered
RETRY_S = 1.0  #: pause before re-opening a watch that failed (cluster unreachable)


class JournalInvalidator:
    """The watch thread of a mount on a backend with ``watch_prefix`` (see the module doc).

    ``invalidate(path bytes) -> int`` is the mount's :meth:`FuseOps.invalidate`. ``invalidated`` counts the
    paths handed to it (tests and benchmarks read it)."""

    def __init__(self, store: Store, invalidate: Callable[[bytes], int]) -> None:
        self.store, self.invalidate = store, invalidate
        self.invalidated = 0
        self._paths: dict[int, set[bytes]] = {}  # inode → the paths this mount served it under
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: Any = None  # the backend's Watch (etcd_backend.Watch) while one is open
        self._thread: threading.Thread | None = None

    def seen(self, path: bytes, ino: int) -> None:
        """The mount served ``path`` as inode ``ino`` (FuseOps.seen, every getattr): the kernel may cache it.
        A write's journal record names only the inode; this is how its paths are found."""
        with self._lock:
            if len(self._paths) >= MAX_TRACKED:  # bounded: forgetting only costs freshness (timeouts)
                self._paths.clear()
            self._paths.setdefault(ino, set()).add(path)

    @staticmethod
    def supported(store: Store) -> bool:
        """Whether the store's backend can be watched (etcd)."""
        return hasattr(store.backend, "watch_prefix")

    def start(self) -> None:
        """Start watching from the cluster's current revision."""
        self._thread = threading.Thread(target=self._run, name="libraryfs-remote-inval", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the watch and join the thread."""
        self._stop.set()
        if self._watch is not None:
            self._watch.close()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        backend = self.store.backend
        own = getattr(backend, "committed_here", lambda _rev: False)  # this mount's own commits
        while not self._stop.is_set():
            try:
                rev = backend.revision() + 1  # type: ignore[attr-defined]
                watch = self._watch = backend.watch_prefix(S.DB_JOURNAL, rev)  # type: ignore[attr-defined]
                log.info(
                    "invalidating the kernel's caches from the journal's changes after revision %d", rev - 1
                )
                for ev in watch:
                    if self._stop.is_set():
                        return
                    if ev.kind == "put" and not own(ev.revision):
                        self._apply(S.JournalRecord.unpack(ev.value))
            except (LibraryError, OSError, ValueError) as e:  # Unavailable, Compacted: start again
                log.warning("journal watch ended (%s); restarting it", e)
                self._stop.wait(RETRY_S)

    def _apply(self, rec: S.JournalRecord) -> None:
        """Drop the kernel's caches of the record's entry and directory (and a rename's source)."""
        with self._lock:
            paths: list[bytes] = list(self._paths.get(rec.ino, ()))
        with self.store.read() as t:
            names = [(rec.parent, rec.name)] + ([(rec.old_parent, rec.old_name)] if rec.old_parent else [])
            for parent, name in names:
                d = t.path_of(parent) if parent else None  # a write's record names only the inode
                if d is None:
                    continue
                paths.append(d)
                if name:
                    paths.append(d.rstrip(b"/") + b"/" + name)
        for p in paths:
            rc = self.invalidate(p)
            self.invalidated += 1
            log.debug("invalidated %r: %d", p, rc)
