"""The mount server keeps its indexer running: a killed or crashed indexer is started again.

``libraryfs mount`` starts the mount server and then the indexer, and records the indexer's pid in
``run.json`` (:func:`libraryfs.layout.write_run`). Nothing watched it afterwards: after ``kill -9``, an
out-of-memory kill or a crash, the mount went on serving while its ``INDEX.md`` pages silently stopped
following writes (``status`` said "not running"). :class:`IndexerWatch` is a thread of the mount server
that notices and starts another, the way systemd's ``Restart=on-failure`` treats a unit:

* **whose indexer**: only the one ``run.json`` names for *this* server (its ``server_pid`` is this
  process). A mount started with ``--no-indexer`` or ``--read-only`` has none; an indexer a user started
  beside it (``libraryfs indexer``) or a one-pass ``libraryfs index`` is not the mount's and is left alone.
* **gone how**: the indexer holds ``indexer.lock`` while it lives (:func:`~libraryfs.layout.indexer_pid`);
  once nobody holds it and the named pid is dead, the indexer's last published status record
  (``CFG_INDEXER_STATUS``) says how it ended, and for a child of this process its exit status too.
  ``stopped`` with its pid, or a child's clean exit or death by SIGTERM/SIGINT/SIGHUP: it was asked to stop
  (``umount``, a user's ``kill``) — respected, not restarted. A state of its own other than ``stopped``: it
  died while running — ``kill -9``, a crash, the OOM killer — and another is started through the same lock
  hand-over as ``libraryfs mount`` (:func:`~libraryfs.daemon.launcher.start_indexer`), with the same
  ``--llm`` choice (``run.json`` ``indexer_llm``); ``run.json`` then names the new pid (``umount`` stops
  that one). No state of its own yet: it ended while starting — a bad setting, or a SIGTERM that came
  before its handler (an indexer publishes its first state only once its handlers are installed, so a
  stop signal cannot be told from a crash there) — logged, not restarted.
* **adopted**: an indexer that ran before the mount (an MCP server's, a user's ``libraryfs indexer``, one
  left by a killed mount: ``run.json`` ``indexer_adopted``) was stopped, if it was, by whoever started it,
  not by this mount: however it ends, the mount starts its own (counted like a restart). Before, an MCP
  server's indexer that the mount had adopted stopped with the MCP server and the mount's TOCs stopped
  following writes ("stopped when asked; not restarted").
* **how often**: at most :data:`RESTARTS` restarts in :data:`RESTART_WINDOW_S` seconds (an indexer that
  dies at start would otherwise be restarted forever); then one error line, and no more restarts by this
  server (``status`` shows "not running" with what to do).
* **the end of the mount**: however the mount ends (``libraryfs umount``, ``fusermount3 -u``, ``umount``,
  SIGTERM to the server), the server stops the indexer ``run.json`` names for it (:meth:`stop_indexer`);
  before, an unmount by the system's tools left it running.
* **when not**: after the mount's loop ended (unmounted or stopping: :meth:`stop`, under :attr:`lock`, so no
  indexer is started once the server is on its way out), or when the mountpoint is no longer in
  ``/proc/mounts``.

Polled every :data:`POLL_S` seconds (a lock probe and, only when the lock is free, one store read): a
restart follows a death within about that. Every line of it goes to the mount's log (``logs/mount.log`` or
the journal). The MCP server keeps the indexer *it* started in the same way
(:class:`libraryfs.daemon.mcpd.IndexerKeeper`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from libraryfs.errors import LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.layout import (
    child_exit,
    indexer_pid,
    is_libraryfs_mount,
    log_path,
    pid_alive,
    read_run,
    write_run,
)
from libraryfs.probes import last_log_line

log = logging.getLogger("libraryfs.mount")

POLL_S = 2.0  #: seconds between two looks at the indexer
RESTARTS = 5  #: restarts allowed within :data:`RESTART_WINDOW_S`
RESTART_WINDOW_S = 600.0  #: seconds of the restart window


#: how a child that was asked to stop ends: a clean exit, or the default action of a stop signal that came
#: before its handler was installed
ASKED_TO_STOP = ("exit status 0", "killed by SIGTERM", "killed by SIGINT", "killed by SIGHUP")


class IndexerWatch:
    """The thread of the module docstring, for the mount of ``libdir`` at ``mountpoint`` served by this
    process from ``store``. :meth:`start` it once the mount is being served, :meth:`stop` it when the
    server's loop has ended. :attr:`restarts` holds the monotonic times of the restarts in the window."""

    def __init__(self, libdir: str, mountpoint: str, store: Store, poll_s: float = POLL_S) -> None:
        self.libdir, self.mountpoint, self.store, self.poll_s = libdir, mountpoint, store, poll_s
        self.lock = threading.Lock()  #: held while deciding on and starting an indexer, and by :meth:`stop`
        self.stopping = threading.Event()
        self.restarts: list[float] = []
        self.gave_up = False
        self.settled: int | None = None  #: a dead indexer not to restart (not looked at again)
        self.exits: dict[int, str] = {}  #: how reaped children ended, by pid
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start polling in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="libraryfs-indexer-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Start no indexer from now on (waits for a start under way to finish; it is then ``umount``'s to
        stop, since ``run.json`` names it)."""
        self.stopping.set()
        with self.lock:
            pass

    def stop_indexer(self) -> int | None:
        """The mount has ended (however: ``libraryfs umount``, ``fusermount3 -u``, ``umount``, SIGTERM to the
        server): SIGTERM the indexer ``run.json`` names for this server, if it still runs, so that no
        indexer outlives its mount unasked (only a killed server leaves one, which the next mount adopts).
        Does not wait for it. Returns its pid, or None."""
        run = read_run(self.libdir)
        pid = run.get("indexer_pid")
        if not isinstance(pid, int) or run.get("server_pid") != os.getpid() or not pid_alive(pid):
            return None
        if indexer_pid(self.libdir) != pid:
            return None  # not holding the lock: not the mount's indexer any more (or already gone)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return None
        log.info("stopping the mount's indexer (pid %d)", pid)
        return pid

    def _run(self) -> None:
        """The polling loop: :meth:`check` every :attr:`poll_s` seconds until :meth:`stop`."""
        while not self.stopping.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # never let the watch take the server down; say what happened
                log.exception("indexer watch: unexpected error (the mount keeps serving)")

    def check(self) -> int | None:
        """One look (module docstring); returns the pid of an indexer started now, else None."""
        run = read_run(self.libdir)
        pid = run.get("indexer_pid")
        if (
            self.gave_up
            or not isinstance(pid, int)
            or pid == self.settled
            or run.get("server_pid") != os.getpid()
        ):
            return None
        # reaped if it is a child of ours (a restarted one; under `mount --foreground` the first one too)
        how = self.exits.get(pid) or child_exit(pid, not_child=None)
        if how:
            self.exits[pid] = how
        if indexer_pid(self.libdir) is not None or pid_alive(pid):
            return None  # it runs (or another indexer holds the lock now: the mount's TOCs are kept)
        if run.get("indexer_adopted") is True:  # not ours: its stop was its owner's, not this mount's
            with self.lock:
                if self.stopping.is_set() or not is_libraryfs_mount(self.mountpoint):
                    return None
                return self._restart(run, pid)
        with self.store.read() as t:
            last = t.cfg_json(S.CFG_INDEXER_STATUS)
        if (last.get("pid") == pid and last.get("state") == "stopped") or how in ASKED_TO_STOP:
            self.settled = pid  # asked to stop (umount, a user's SIGTERM): not a failure
            log.info("the indexer (pid %d) stopped when asked; not restarted", pid)
            return None
        if last.get("pid") != pid:  # it never published a state: it ended while starting
            self.settled = pid
            log.warning(
                "the indexer (pid %d) ended while starting%s (its log ends: %s); not restarted: "
                "`libraryfs status` says how to start one",
                pid, f" ({how})" if how else "", last_log_line(log_path(self.libdir, "indexer")) or "-",
            )  # fmt: skip
            return None
        with self.lock:
            if self.stopping.is_set() or not is_libraryfs_mount(self.mountpoint):
                return None
            return self._restart(run, pid)

    def _restart(self, run: dict, pid: int) -> int | None:
        """Start another indexer in place of ``pid`` (dead without stopping), within the restart budget;
        record it in ``run.json``. Returns its pid, or None (budget spent, or the lock was taken by another
        indexer meanwhile, or it could not be spawned: logged, tried again at the next poll)."""
        from libraryfs.daemon.launcher import _claim_indexer, start_indexer

        ended = last_log_line(log_path(self.libdir, "indexer")) or "(no log line)"
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_S]
        if len(self.restarts) >= RESTARTS:
            self.gave_up = True  # `status` says so (run.json indexer_gave_up)
            write_run(
                self.libdir,
                {**run, "indexer_gave_up": f"{len(self.restarts)} restarts in {RESTART_WINDOW_S:.0f} s"},
            )
            log.error(
                "the indexer (pid %d) exited without stopping again (its log ends: %s); not restarted after "
                "%d restarts in %.0f s: TOCs no longer follow writes until an indexer runs "
                "(`libraryfs indexer %s --mountpoint %s`, or mount again)",
                pid, ended, len(self.restarts), RESTART_WINDOW_S, self.libdir, self.mountpoint,
            )  # fmt: skip
            return None
        try:
            running, lock_fd = _claim_indexer(self.libdir, timeout_s=0.0)
        except LibraryError as e:  # one is shutting down: look again at the next poll
            log.info("indexer watch: %s", e)
            return None
        if running:
            log.info("the indexer (pid %d) is gone; indexer pid %d runs now", pid, running)
            write_run(self.libdir, {**run, "indexer_pid": running, "indexer_adopted": True})
            return None
        self.restarts.append(now)
        try:
            new = start_indexer(self.libdir, self.mountpoint, llm=run.get("indexer_llm"), lock_fd=lock_fd)
        except OSError as e:
            log.error("the indexer (pid %d) is gone and another could not be started: %s", pid, e)
            return None
        finally:
            os.close(lock_fd)  # the new indexer holds it now (or, if it never started, nobody does)
        write_run(self.libdir, {**run, "indexer_pid": new, "indexer_adopted": False})
        log.warning(
            "the indexer (pid %d) %s (its log ends: %s); started another (pid %d, "
            "restart %d of at most %d in %.0f s)",
            pid,
            "this mount found running has ended" if run.get("indexer_adopted") is True else "exited without stopping",
            ended, new, len(self.restarts), RESTARTS, RESTART_WINDOW_S,
        )  # fmt: skip
        return new
