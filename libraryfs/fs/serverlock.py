"""The mount server's one lock around the Python handlers of FUSE requests (issue 18, "many agents at once").

With ``mount.threads`` > 1 the mount serves with libfuse's multithreaded loop (``fuse_loop_mt``, that many
worker threads; the default 1 is the single-threaded ``fuse_loop``, which needs no lock and takes none).
What the workers do in parallel is what runs outside Python: reading the
next request from ``/dev/fuse``, libfuse's own path bookkeeping, and writing the reply to the kernel — about
41 % of the single-threaded server's busy time, 51–65 % with 8 clients (docs/benchmarks.md "Where
libraryfs's server spends its time") — and a request's wait for a sync (:meth:`ServerLock.released`, used by
``fsync``: :meth:`Store.sync <libraryfs.fs.store.Store.sync>` groups concurrent syncs into one).

The Python handlers themselves run one at a time under :class:`ServerLock`: the view's state (the handle
table, pending creates, hard-link names, read counters and budget, snapshots of generated files) keeps the
one-request-at-a-time invariants it was written for, and no handler sees another half-done. The GIL would
serialise that Python anyway; the lock adds only that a handler which releases the GIL (an LMDB commit)
is not interleaved with another. The mount's background threads (TOC invalidation, the periodic sync,
:mod:`libraryfs.fs.remote_inval`) never take it, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ServerLock:
    """A mutex (not re-entrant) that knows its owner thread: ``with lock:`` around one request's handler;
    :meth:`held` says whether the calling thread is serving a request; :meth:`released` lets other requests
    run while this one waits for something that touches no view state (a sync)."""

    __slots__ = ("_lock", "owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner = 0  #: ``threading.get_ident()`` of the holder, 0 when free

    def __enter__(self) -> ServerLock:
        """Wait for the lock and take it."""
        self._lock.acquire()
        self.owner = threading.get_ident()
        return self

    def __exit__(self, *exc: object) -> None:
        """Give the lock back (the holder only)."""
        self.owner = 0
        self._lock.release()

    def held(self) -> bool:
        """Whether the calling thread holds the lock (is serving a request)."""
        return self.owner == threading.get_ident()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Inside a ``with lock:`` block: give the lock up for the body and take it back after (the holder only;
        the body must not touch state the lock guards)."""
        self.__exit__()
        try:
            yield
        finally:
            self.__enter__()
