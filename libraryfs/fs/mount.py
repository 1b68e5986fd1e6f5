"""Mount lifecycle: the background work of a serving mount, started and stopped around the FUSE loop.

:func:`serve` is what the mount server (:mod:`libraryfs.daemon.mountd`) calls. In order:

1. build the adapter's :class:`~libraryfs.fs.fuse_adapter.FuseOps` over the view;
2. :meth:`MountTasks.start`: one thread that (a) watches the indexer's TOC generation and drops the kernel's
   cached attributes and pages of every TOC file the indexer rewrote (through
   :meth:`FuseOps.invalidate <libraryfs.fs.fuse_adapter.FuseOps.invalidate>`, libfuse's
   ``fuse_invalidate_path``) and of the paths the FUSE loop deferred to it (other names of a hard-linked
   file that is open, :mod:`libraryfs.fs.aliases`), frees the orphans an MCP server left that this mount no
   longer holds open (``config[orphans]``), and (b) syncs the store every ``sync_interval_s`` so committed data survives
   an OS crash within that window (ARCHITECTURE §7: unsynced commits survive a process crash only);
3. :func:`fuse_adapter.run <libraryfs.fs.fuse_adapter.run>` mounts and serves until unmounted (libfuse's
   ``destroy`` syncs the store);
4. :meth:`MountTasks.stop`: the thread is told to stop and joined, so nothing reads the store after
   :func:`serve` returns and the caller may close it.

The caller (mountd) owns what surrounds this: the library lock, the clean flag, signals and readiness.
Only :mod:`libraryfs.fs.fuse_adapter` imports mfusepy; this module reads the store's config keys
(:data:`~libraryfs.fs.schema.CFG_TOC_GEN`, :data:`~libraryfs.fs.schema.CFG_TOC_DIRTY`) and the names of
:mod:`libraryfs.fs.generated`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from libraryfs.fs.fuse_adapter import DEFAULT_THREADS, FuseOps, run
from libraryfs.fs.remote_inval import JournalInvalidator
from libraryfs.fs.store import Store
from libraryfs.fs.tocwatch import TocWatcher
from libraryfs.fs.view import LibraryView

log = logging.getLogger("libraryfs.mount")

POLL_S = 0.2  #: how often (seconds) the TOC generation is read (one LMDB read, a few µs)
SYNC_INTERVAL_S = 1.0  #: how often (seconds) the store is synced while serving
#: ``LIBRARYFS_REMOTE_INVAL=0`` turns the journal watch of an etcd mount off (to measure it)
REMOTE_INVAL_ENV = "LIBRARYFS_REMOTE_INVAL"
STOP_TIMEOUT_S = 5.0  #: how long :meth:`MountTasks.stop` waits for the thread


class MountTasks:
    """The background thread of a mount: TOC cache invalidation and the periodic sync (module doc).

    ``invalidate(path bytes) -> int`` drops the kernel's caches of one path (0, or a negative errno: a
    failure only delays freshness); ``deferred() -> list[bytes]`` (optional) hands over more paths to
    invalidate that the FUSE loop could not safely invalidate itself (hard links' other names while open);
    ``refresh()`` (optional) re-reads store flags the view caches (whether any ``security.*`` xattr exists,
    which another process or host may have stored); ``reclaim()`` (optional) frees the orphans another
    process registered that this mount no longer holds open (:meth:`LibraryView.reclaim_orphans
    <libraryfs.fs.view.LibraryView.reclaim_orphans>`; one read when there are none). Explicit :meth:`start` / :meth:`stop`; an error in one pass is logged
    and the next pass runs.
    """

    def __init__(
        self,
        store: Store,
        invalidate: Callable[[bytes], int],
        *,
        poll_s: float = POLL_S,
        sync_interval_s: float = SYNC_INTERVAL_S,
        deferred: Callable[[], list[bytes]] | None = None,
        refresh: Callable[[], None] | None = None,
        reclaim: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.invalidate = invalidate
        self.deferred = deferred
        self.refresh = refresh
        self.reclaim = reclaim
        self.poll_s = poll_s
        self.sync_interval_s = sync_interval_s
        self.watcher = TocWatcher(store)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once). Raises ``RuntimeError`` if already started."""
        if self._thread is not None:
            raise RuntimeError("mount tasks already started")
        self._thread = threading.Thread(target=self._run, name="libraryfs-mount-tasks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Stop the thread and wait up to ``timeout_s`` for it; True when it has ended (or never started)."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def tick(self, last_sync_s: float) -> float:
        """One pass: invalidate rewritten TOC files; sync when ``sync_interval_s`` has passed since
        ``last_sync_s`` (monotonic s). Returns the time of the last sync."""
        for path in self.watcher.poll():
            self.invalidate(path)
        for path in self.deferred() if self.deferred is not None else ():
            self.invalidate(path)
        if self.refresh is not None:
            self.refresh()
        if self.reclaim is not None:
            self.reclaim()
        if time.monotonic() - last_sync_s >= self.sync_interval_s:
            self.store.sync()
            return time.monotonic()
        return last_sync_s

    def _run(self) -> None:
        last_sync_s = time.monotonic()
        while not self._stop.wait(self.poll_s):
            try:
                last_sync_s = self.tick(last_sync_s)
            except Exception:  # keep serving; a failed invalidation only delays freshness
                log.exception("mount background pass failed")


def serve(
    view: LibraryView,
    mountpoint: str,
    *,
    foreground: bool = True,
    allow_other: bool = False,
    read_only: bool = False,
    timeouts_s: tuple[float, float, float] = (1.0, 1.0, 1.0),
    on_init: Callable[[], None] | None = None,
    debug: bool = False,
    fsname: str = "libraryfs",
    threads: int = DEFAULT_THREADS,
) -> None:
    """Mount ``view`` at ``mountpoint`` and serve until unmounted (blocks), with its background work.

    ``timeouts_s``: the kernel's entry, attribute and negative-lookup cache timeouts in seconds;
    ``on_init()`` runs inside libfuse's ``init`` (the loop is live); ``threads``: FUSE worker threads (1: the
    single-threaded loop). Options as :func:`libraryfs.fs.fuse_adapter.run`; raises ``RuntimeError`` when
    libfuse cannot mount.
    """
    ops = FuseOps(view, timeouts_s=timeouts_s, on_init=on_init)
    view.virtual.control.requests = ops.requests  # status.json's fuse_requests
    tasks = MountTasks(
        view.store,
        ops.invalidate,
        deferred=ops.take_deferred,
        refresh=view.attrs.refresh_security_flag,
        reclaim=None if view.read_only else view.reclaim_orphans,
    )
    tasks.start()
    # a shared (etcd) store: other hosts' mounts write too; their journal records drive our kernel caches
    remote = None
    if JournalInvalidator.supported(view.store) and os.environ.get(REMOTE_INVAL_ENV) != "0":
        remote = JournalInvalidator(view.store, ops.invalidate)
        ops.seen = remote.seen
        remote.start()
    try:
        run(
            ops,
            mountpoint,
            foreground=foreground,
            allow_other=allow_other,
            read_only=read_only,
            debug=debug,
            fsname=fsname,
            threads=threads,
        )
    finally:
        if remote is not None:
            remote.stop()
        if not tasks.stop():
            log.warning("mount background thread did not stop within %.0f s", STOP_TIMEOUT_S)
