"""The mount server process: open the store, serve the FUSE mount, shut down in order.

Lifecycle (s3ql's ``mount.py``): take the library lock (two servers can never serve one library) → open the
store (after any fork) → if the last stop was unclean, run the consistency check → purge inodes orphaned by
a crash → mark the library unclean → mount and serve → on unmount/SIGTERM/SIGINT: sync, mark clean, close.
Readiness: ``on_ready`` runs once the kernel has completed FUSE INIT and the mountpoint answers ``statvfs``.

:func:`run_process` is the whole process (settings, logging, signals, :func:`run`); it runs as
``python -m libraryfs.daemon.mountd LIBDIR MOUNTPOINT [options]`` (what ``libraryfs mount`` spawns; the flags
are parsed by the click command :func:`libraryfs.cli.mount_cmds.mountd_main`) and in-process for
``libraryfs mount --foreground``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from libraryfs.errors import InvalidArgument, LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.backends import store_url
from libraryfs.fs.holder import RECOVERY_LEASE, Holder, describe_holder, mount_lease_name, other_mounts
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.index.find import finder_for
from libraryfs.layout import (
    MOUNT_LOCK,
    acquire_lock,
    mount_record_key,
    mount_state,
    reset_signal_mask,
    wait_until_mounted,
)
from libraryfs.words import count

log = logging.getLogger("libraryfs.mount")
RECOVERY_WAIT_S = 60.0  #: how long a starting mount waits for the recovery lease before mounting without it


class Lifecycle:
    """Signals of the mount server, handled by one ``sigwait`` thread (never inside the FUSE loop).

    SIGTERM/SIGINT → ``STOPPING=1`` at once, then ``fuse_exit`` and a SIGUSR2 to the main thread so its
    blocking wait returns EINTR (the single-threaded loop's read of /dev/fuse; the multithreaded loop's wait
    for its workers, which it then stops — a worker finishes the request it is serving first: libfuse lets
    a worker be cancelled only while it waits for a request): the loop exits, libfuse unmounts (lazily, so open files do not block it) and ``run`` syncs and sets the clean flag.
    SIGHUP → ``on_reload()`` (``RELOADING=1`` … ``READY=1``). The three signals are blocked in every thread
    (libfuse installs its own handlers only over SIG_DFL and would otherwise race ours); call
    :meth:`install` from the main thread before any other thread starts. (s3ql ``mount.py``: ordered
    teardown.)
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self, on_reload: Callable[[], None] | None = None) -> None:
        self.on_reload = on_reload
        self.stop_requested = threading.Event()
        self.stopping_sent = False
        self._lock = threading.Lock()
        self._fuse_ptr: int | None = None
        self._main_ident: int | None = None

    def install(self) -> bool:
        """Block the signals and start the handler thread; False (nothing done) off the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._main_ident = threading.get_ident()
        signal.signal(signal.SIGUSR2, lambda *_: None)  # only to interrupt the FUSE read with EINTR
        for sig in self.SIGNALS:  # not SIG_DFL any more: libfuse leaves them to us
            signal.signal(sig, lambda *_: None)
        signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        threading.Thread(target=self._wait, name="libraryfs-signals", daemon=True).start()
        return True

    def _wait(self) -> None:
        while True:
            sig = signal.sigwait(self.SIGNALS)
            if sig == signal.SIGHUP:
                if self.on_reload is not None and not self.stop_requested.is_set():
                    try:
                        self.on_reload()
                    except Exception as e:  # a bad config file must not kill a serving mount
                        log.error("reload failed, keeping the current settings: %s", e)
                        notify_mod().notify("READY=1\nSTATUS=reload failed: " + str(e).replace("\n", " "))
                continue
            self.request_stop(signal.Signals(sig).name)

    def send_stopping(self, why: str) -> None:
        """``STOPPING=1`` once, with a status line saying why."""
        with self._lock:
            if self.stopping_sent:
                return
            self.stopping_sent = True
        notify_mod().stopping(f"stopping ({why})")

    def request_stop(self, why: str) -> None:
        """Begin shutdown: STOPPING=1, then make the FUSE loop exit (now if serving, else at attach)."""
        log.info("%s received: finishing in-flight requests and unmounting", why)
        self.send_stopping(why)
        self.stop_requested.set()
        with self._lock:
            self._exit_loop()

    def attach(self, fuse_ptr: int) -> None:
        """The FUSE loop is running (called from FUSE ``init``); exits at once if a stop is pending."""
        with self._lock:
            self._fuse_ptr = fuse_ptr
            if self.stop_requested.is_set():
                self._exit_loop()

    def detach(self) -> None:
        """The FUSE loop has returned: the session pointer is no longer valid."""
        with self._lock:
            self._fuse_ptr = None

    def _exit_loop(self) -> None:
        if self._fuse_ptr is None:
            return
        from libraryfs.fs.fuse_adapter import exit_session

        exit_session(self._fuse_ptr)
        if self._main_ident is not None:
            signal.pthread_kill(self._main_ident, signal.SIGUSR2)


def systemd_unit() -> str | None:
    """Name of the systemd unit running this process (from ``/proc/self/cgroup``), or None outside one."""
    if not os.environ.get("INVOCATION_ID"):
        return None
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                leaf = line.rstrip("\n").rsplit("/", 1)[-1]
                if leaf.endswith(".service"):
                    return leaf
    except OSError:
        pass
    return None


def notify_mod():
    """:mod:`libraryfs.notify` (imported lazily: the server may run where it is not needed)."""
    from libraryfs import notify

    return notify


def check_paths(libdir: str, mountpoint: str) -> None:
    """Refuse a mountpoint inside the library directory or the reverse (the server would serve its own
    store through itself and deadlock, cases C25): raises :class:`~libraryfs.errors.InvalidArgument`."""
    for inner, outer, what in (
        (mountpoint, libdir, "mountpoint {m} is inside the library directory {l}"),
        (libdir, mountpoint, "library directory {l} is inside the mountpoint {m}"),
    ):
        r_in, r_out = os.path.realpath(inner), os.path.realpath(outer)
        if r_in == r_out or r_in.startswith(r_out.rstrip("/") + "/"):
            raise InvalidArgument(what.format(m=mountpoint, l=libdir))


def recover(store: Store, *, check_on_unclean: bool, read_only: bool) -> str:
    """After an unclean stop (clean flag not set) run the consistency check with repair (s3ql's needs-check
    flag); returns the phrase the "mounted" log line ends with ("" after a clean stop)."""
    with store.read() as t:
        clean = t.cfg(S.CFG_CLEAN) != b"0"
    if clean or not check_on_unclean or read_only:
        return ""
    from libraryfs.fs.check import check

    notify_mod().status("checking the store after an unclean stop")
    report = check(store, repair=True)
    log.warning(
        "unclean shutdown detected: check found %s, repaired %d",
        count(len(report.problems), "problem"),
        report.repaired,
    )
    return f" after an unclean stop (check: {count(len(report.problems), 'problem')}, {report.repaired} repaired)"


def _set_mounted(store: Store, key: bytes, status: dict | None, *, alone: bool = True) -> None:
    """Register this mount (``status``) or unregister it (None); synced either way.

    ``key`` (:func:`~libraryfs.layout.mount_record_key`) is the mount's status record. The clean flag
    (:data:`~libraryfs.fs.schema.CFG_CLEAN`) is ``0`` while any read-write mount is registered: on a shared
    store an unregistering mount sets it back to ``1`` only when no other mount's record is left (so a mount
    that died keeps it ``0`` until a mount starting ``alone`` checks the store and drops the dead records).
    Two mounts unregistering at once (two hosts) cannot both miss the flag: the transaction reads every other
    record by its key, so the second to commit conflicts with the first's delete and runs again."""
    shared = key != S.CFG_MOUNT_STATUS

    def mark(t):
        """The write transaction body: the clean flag and this mount's status record (see above)."""
        if status is not None:
            if shared and alone:  # every other record is a dead mount's (no mount lease is held)
                for k, _ in list(t.kv.prefix(S.DB_CONFIG, S.CFG_MOUNTS, keys_only=True)):
                    t.kv.delete(S.DB_CONFIG, k)
            t.put_cfg(S.CFG_CLEAN, b"0")
            t.put_cfg(key, S.dumps(status))
        elif not shared:
            t.put_cfg(S.CFG_CLEAN, b"1")
            t.put_cfg(key, S.dumps({}))
        else:
            t.kv.delete(S.DB_CONFIG, key)
            others = [k for k, _ in t.kv.prefix(S.DB_CONFIG, S.CFG_MOUNTS, keys_only=True)]
            # each other record read by its key too: a range read conflicts with a record put meanwhile but
            # not with one deleted (etcd_txn), so two mounts unregistering at once each saw the other's
            # record, both committed, and neither set the flag; now the second conflicts and runs again
            for k in others:
                t.kv.get(S.DB_CONFIG, k)
            if not others:
                t.put_cfg(S.CFG_CLEAN, b"1")

    store.run_write(mark)
    store.sync()


@contextmanager
def _alone(store: Store, libdir: str, read_only: bool, lifecycle: Lifecycle | None) -> Iterator[bool]:
    """Whether this starting mount may run what no other serving mount may see happen — the check after an
    unclean stop and the purge of orphaned inodes (another mount may hold such an inode open) — held until the
    block ends. Always on a store one host serves (the flock excludes every other mount); on a shared store
    (etcd) while this process holds the single :data:`~libraryfs.fs.holder.RECOVERY_LEASE` and no other
    read-write mount holds its lease (a mount registering meanwhile waits for that lease). Read-only: False."""
    if read_only or not hasattr(store.backend, "acquire_lease"):
        yield not read_only
        return
    stop, deadline = threading.Event(), time.monotonic() + RECOVERY_WAIT_S

    def poll() -> None:
        """Give up waiting at the deadline (cluster unreachable, a holder stuck) or when asked to stop."""
        if time.monotonic() > deadline or (lifecycle is not None and lifecycle.stop_requested.is_set()):
            stop.set()

    guard = Holder.wait_take(store.backend, RECOVERY_LEASE, {"libdir": libdir}, stop, on_poll=poll)
    if guard is None:
        log.warning("no check or orphan purge at this mount: the %r lease stayed taken", RECOVERY_LEASE)
    try:
        others = other_mounts(store.backend, libdir)
        if others:
            log.info(
                "%s serve%s this library (%s): no check or orphan purge at this mount",
                count(len(others), "other read-write mount"),
                "s" if len(others) == 1 else "",
                ", ".join(describe_holder(f) for f in others),
            )
        yield guard is not None and not others
    finally:
        if guard is not None:
            guard.release()


def run(
    libdir: str,
    mountpoint: str,
    *,
    read_only: bool = False,
    allow_other: bool = False,
    timeouts_s: tuple[float, float, float] = (1.0, 1.0, 1.0),
    budget=None,
    on_ready: Callable[[], None] | None = None,
    check_on_unclean: bool = True,
    lifecycle: Lifecycle | None = None,
    threads: int | None = None,
) -> int:
    """Serve one library until unmounted; returns a process exit status. Raises :class:`Busy` if locked.

    Order: lock → this mount's etcd lease (a shared store) → clear a stale mountpoint (ENOTCONN, left by a
    killed server) → consistency check if the last stop was unclean → purge orphans (both only when no other
    read-write mount serves the library: :func:`_alone`) → register (clean flag off) → serve → (unmount /
    ``lifecycle`` stop) STOPPING=1 → sync → unregister (clean flag on when no other mount is registered).
    ``lifecycle`` (from :func:`run_process`) turns signals into that stop. ``threads``: FUSE worker threads
    (``mount.threads``; None: its default).
    """
    from libraryfs.fs.mount import serve  # imports mfusepy (libfuse) only in the server

    libdir = os.path.abspath(libdir)
    mountpoint = os.path.abspath(mountpoint)
    check_paths(libdir, mountpoint)
    if not read_only and store_url(libdir) is None and not os.access(os.path.join(libdir, "store"), os.W_OK):
        raise LibraryError(f"the library {libdir} cannot be written (read-only): mount it with --read-only")
    lock_fd = acquire_lock(libdir, MOUNT_LOCK)
    store = Store(libdir, readonly=read_only, verify=True)  # a damaged store is refused, never served
    holder = None
    try:
        from libraryfs.daemon.launcher import clear_stale

        if not read_only:  # a shared (etcd) store: one lease per read-write mount (docs/scale-out.md)
            holder = Holder.take(
                store.backend,
                mount_lease_name(libdir),
                {"mountpoint": mountpoint, "libdir": libdir},
                "mounted",
            )

        if mount_state(mountpoint) == "stale":
            clear_stale(mountpoint)
            log.warning("cleared a stale mount at %s (its server had died)", mountpoint)
        key = mount_record_key(libdir, store.backend)
        if threads is None:
            from libraryfs.settings_spec import SPEC

            threads = int(SPEC["mount.threads"].default)
        status = _status_provider(mountpoint, read_only, allow_other, timeouts_s, threads)
        with _alone(store, libdir, read_only, lifecycle) as alone:  # etcd: no other mount sees the purge
            recovered = recover(store, check_on_unclean=check_on_unclean and alone, read_only=read_only)
            if lifecycle is not None and lifecycle.stop_requested.is_set():
                return 0  # stopped before mounting: nothing was changed
            # count_tokens=None: TOC pages carry the indexer's counts; anything else is estimated (bytes/4)
            view = LibraryView(
                store,
                read_only=read_only,
                finder=finder_for(libdir),
                status_provider=status,
                budget=budget,
                count_tokens=None,
            )
            if alone:
                n = view.purge_orphans()
                if n:
                    log.info("removed %s left by a crash", count(n, "orphaned inode"))
            if not read_only:
                _set_mounted(store, key, status(), alone=alone)
        watch = None
        if not read_only:  # a killed or crashed indexer of this mount is started again (daemon.indexwatch)
            from libraryfs.daemon.indexwatch import IndexerWatch

            watch = IndexerWatch(libdir, mountpoint, store)
            watch.start()
        try:
            serve(
                view,
                mountpoint,
                read_only=read_only,
                allow_other=allow_other,
                timeouts_s=timeouts_s,
                on_init=_on_init(libdir, mountpoint, recovered, on_ready, lifecycle),
                fsname="libraryfs:" + libdir.replace(",", "\\,"),
                threads=threads,
            )
        finally:
            if watch is not None:
                watch.stop()
                watch.stop_indexer()  # no indexer outlives its mount unasked (daemon.indexwatch)
            if lifecycle is not None:
                lifecycle.detach()
                lifecycle.send_stopping("unmounted")  # no-op if a signal already said so
        log.info("unmounted %s; flushing", mountpoint)
        if not read_only:
            _set_mounted(store, key, None)
        log.info("clean shutdown of %s", libdir)
        return 0
    finally:
        if holder is not None:
            holder.release()
        store.close()
        os.close(lock_fd)


def _status_provider(
    mountpoint: str,
    read_only: bool,
    allow_other: bool,
    timeouts_s: tuple[float, float, float],
    threads: int = 1,
) -> Callable[[], dict]:
    """The mount's facts for ``.libraryfs/status.json`` and ``libraryfs status`` (uptime in seconds;
    ``threads``: the server's FUSE worker threads, ``mount.threads``)."""
    started = time.time()
    unit = systemd_unit()

    def status() -> dict:
        """The mount's facts now: pid, mountpoint, start time and uptime (seconds), options, kernel cache
        timeouts (seconds), FUSE worker threads, systemd unit."""
        return {
            "pid": os.getpid(),
            "mountpoint": mountpoint,
            "started": started,
            "uptime_s": round(time.time() - started, 3),
            "read_only": read_only,
            "allow_other": allow_other,
            "timeouts_s": list(timeouts_s),
            "threads": threads,
            "systemd_unit": unit,
        }

    return status


def _on_init(
    libdir: str,
    mountpoint: str,
    recovered: str,
    on_ready: Callable[[], None] | None,
    lifecycle: Lifecycle | None,
) -> Callable[[], None]:
    """The FUSE ``init`` callback: attach the lifecycle to the session, then (in a thread, since the
    kernel completes INIT only after ``init`` returns) wait until the mountpoint answers and call
    ``on_ready``."""
    from libraryfs.fs.fuse_adapter import current_session

    real_mountpoint = os.path.realpath(mountpoint)  # resolved now, before the mount covers it

    def on_init() -> None:
        """The FUSE ``init`` callback (libfuse ``fuse_lowlevel_ops.init``): attach the lifecycle, then start
        the readiness waiter thread."""
        if lifecycle is not None:  # inside FUSE init: the context names our session
            lifecycle.attach(current_session())

        def waiter() -> None:
            """Wait (30 s at most) until the mountpoint answers, then log "mounted" and call ``on_ready``
            unless a stop was requested."""
            if wait_until_mounted(real_mountpoint, 30.0, from_child=True):
                log.info("mounted %s at %s%s", libdir, mountpoint, recovered)
                if on_ready is not None and not (lifecycle and lifecycle.stop_requested.is_set()):
                    on_ready()

        threading.Thread(target=waiter, name="libraryfs-ready", daemon=True).start()

    return on_init


def _read_budget(spec: str | None):
    """The mount's :class:`ReadBudget` for a ``reads=N,tokens=M`` spec, None without one."""
    if not spec:
        return None
    from libraryfs.fs.budget import ReadBudget, parse_budget_spec

    return ReadBudget(parse_budget_spec(spec))


def run_process(libdir: str, mountpoint: str, overrides: Mapping[str, Any] | None = None) -> int:
    """The mount server process (foreground; logs to stderr, journald-style under systemd); returns its exit
    status.

    ``overrides``: flag values by dotted setting key (``mount.*``, ``log.*``). Settings: flags >
    ``LIBRARYFS_*`` environment > ``<libdir>/config.toml`` > defaults (:mod:`libraryfs.settings`). Under
    systemd (``NOTIFY_SOCKET``): ``READY=1`` once the mountpoint answers, ``STOPPING=1`` as soon as shutdown
    begins, ``RELOADING=1``/``READY=1`` around a SIGHUP reload (log levels apply at once; mount options at the
    next mount). Raises :class:`~libraryfs.errors.LibraryError` when it cannot start (bad setting, the
    library already mounted — :class:`~libraryfs.errors.Busy` names the pid —, the mount failing).
    """
    from libraryfs import notify
    from libraryfs.settings import configure_logging, load_settings, rows, timeouts_s

    overrides = dict(overrides or {})
    settings = load_settings(libdir, overrides)
    configure_logging(settings)
    m = settings["mount"]
    budget = _read_budget(m["budget"])
    mountpoint = os.path.abspath(mountpoint)
    current = {"settings": settings}

    def reload() -> None:
        """On SIGHUP: reload the settings (systemd ``RELOADING=1`` … ``READY=1``); log levels apply at once,
        changed ``mount.*`` keys at the next mount. A bad setting raises
        :class:`~libraryfs.settings.SettingsError` (the current settings stay)."""
        notify.reloading("reloading settings")
        new = load_settings(libdir, overrides)
        configure_logging(new)
        old = {k: v for k, v, _src in rows(current["settings"])}
        changed = [k for k, v, _src in rows(new) if old.get(k) != v]
        later = [k for k in changed if k.startswith("mount.")]
        current["settings"] = new
        log.info(
            "settings reloaded (SIGHUP): %s changed%s",
            ", ".join(changed) or "nothing",
            f"; {', '.join(later)} take effect at the next mount" if later else "",
        )
        notify.notify(f"READY=1\nSTATUS=mounted at {mountpoint} (settings reloaded)")

    reset_signal_mask()  # whatever the starter had blocked; Lifecycle blocks its own three below
    lifecycle = Lifecycle(on_reload=reload)
    lifecycle.install()
    try:
        return run(
            libdir,
            mountpoint,
            read_only=m["read_only"],
            allow_other=m["allow_other"],
            timeouts_s=timeouts_s(settings),
            budget=budget,
            on_ready=lambda: notify.ready(f"mounted at {mountpoint}"),
            lifecycle=lifecycle,
            threads=m["threads"],
        )
    except RuntimeError as e:  # mfusepy: the kernel refused the mount
        raise LibraryError(f"mount failed: {e}") from None


# the process entry: `python -m libraryfs.daemon.mountd LIBDIR MOUNTPOINT [options]` (flags parsed by the CLI)
if __name__ == "__main__":
    from libraryfs.cli.mount_cmds import mountd_main

    mountd_main()
