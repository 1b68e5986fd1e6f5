"""The mount server process: open the store, serve the FUSE mount, shut down in order.

Lifecycle (s3ql's ``mount.py``): take the library lock (two servers can never serve one library) → open the
store (after any fork) → if the last stop was unclean, run the consistency check → purge inodes orphaned by
a crash → mark the library unclean → mount and serve → on unmount/SIGTERM/SIGINT: sync, mark clean, close.
Readiness: ``on_ready`` runs once the kernel has completed FUSE INIT and the mountpoint answers ``statvfs``.

Run as ``python -m libraryfs.daemon.mountd LIBDIR MOUNTPOINT [options]`` (what ``libraryfs mount`` spawns).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from libraryfs.errors import Busy, InvalidArgument, LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.index.find import find
from libraryfs.layout import proc_mount

log = logging.getLogger("libraryfs.mount")

LOCK_NAME = "mount.lock"


def acquire_lock(libdir: str, name: str = LOCK_NAME) -> int:
    """Take the exclusive lock file of a library; raises :class:`Busy` naming the holder's pid."""
    path = os.path.join(libdir, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 64, 0).decode().strip() or "?"
        finally:
            os.close(fd)
        what = "mounted" if name == LOCK_NAME else "indexed"
        raise Busy(f"library {libdir} is already {what} by pid {holder}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def wait_until_mounted(mountpoint: str, timeout_s: float = 10.0) -> bool:
    """Poll until ``mountpoint`` is a live FUSE mount of ours (``/proc/mounts`` + ``statvfs``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_mounted(mountpoint):
            try:
                os.statvfs(mountpoint)
                return True
            except OSError:
                pass
        time.sleep(0.02)
    return False


def mount_entry(mountpoint: str) -> str | None:
    """The fstype of what ``/proc/mounts`` lists at ``mountpoint``, or None."""
    m = proc_mount(mountpoint)
    return None if m is None else m[1]


def is_mounted(mountpoint: str) -> bool:
    """Whether a libraryfs FUSE mount sits at ``mountpoint`` according to ``/proc/mounts``."""
    fs = mount_entry(mountpoint)
    return fs is not None and fs.startswith("fuse")


class Lifecycle:
    """Signals of the mount server, handled by one ``sigwait`` thread (never inside the FUSE loop).

    SIGTERM/SIGINT → ``STOPPING=1`` at once, then ``fuse_exit`` and a SIGUSR2 to the main thread so its
    blocking read of /dev/fuse returns EINTR: the single-threaded loop finishes the request in flight, exits,
    libfuse unmounts (lazily, so open files do not block it) and ``run`` syncs and sets the clean flag.
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
) -> int:
    """Serve one library until unmounted; returns a process exit status. Raises :class:`Busy` if locked.

    Order: lock → clear a stale mountpoint (ENOTCONN, left by a killed server) → consistency check if the
    last stop was unclean → purge orphans → clean flag off → serve → (unmount / ``lifecycle`` stop)
    STOPPING=1 → sync → clean flag on. ``lifecycle`` (from :func:`main`) turns signals into that stop.
    """
    # imports mfusepy (libfuse) only in the server
    from libraryfs.fs.fuse_adapter import current_session
    from libraryfs.fs.mount import serve

    libdir = os.path.abspath(libdir)
    mountpoint = os.path.abspath(mountpoint)
    for inner, outer, what in (
        (mountpoint, libdir, "mountpoint {m} is inside the library directory {l}"),
        (libdir, mountpoint, "library directory {l} is inside the mountpoint {m}"),
    ):
        r_in, r_out = os.path.realpath(inner), os.path.realpath(outer)
        if r_in == r_out or r_in.startswith(r_out.rstrip("/") + "/"):
            # the server would serve its own store through itself and deadlock (cases C25)
            raise InvalidArgument(what.format(m=mountpoint, l=libdir))
    lock_fd = acquire_lock(libdir)
    store = Store(libdir)
    notify = notify_mod()
    try:
        from libraryfs.daemon.launcher import clear_stale, probe

        if probe(mountpoint) == "stale":
            clear_stale(mountpoint)
            log.warning("cleared a stale mount at %s (its server had died)", mountpoint)
        with store.read() as t:
            clean = t.cfg(S.CFG_CLEAN) != b"0"
        recovered = ""
        if not clean and check_on_unclean and not read_only:
            from libraryfs.fs.check import check

            notify.status("checking the store after an unclean stop")
            report = check(store, repair=True)
            log.warning(
                "unclean shutdown detected: check found %d problem(s), repaired %d",
                len(report.problems),
                report.repaired,
            )
            recovered = (
                f" after an unclean stop (check: {len(report.problems)} problem(s), "
                f"{report.repaired} repaired)"
            )
        if lifecycle is not None and lifecycle.stop_requested.is_set():
            return 0  # stopped before mounting: nothing was changed
        started = time.time()

        unit = systemd_unit()

        def status_provider() -> dict:
            return {
                "pid": os.getpid(),
                "mountpoint": mountpoint,
                "started": started,
                "uptime_s": round(time.time() - started, 3),
                "read_only": read_only,
                "allow_other": allow_other,
                "timeouts_s": list(timeouts_s),
                "systemd_unit": unit,
            }

        # count_tokens=None: TOC pages carry the indexer's counts; anything else is estimated (bytes/4)
        view = LibraryView(
            store,
            read_only=read_only,
            finder=find,
            status_provider=status_provider,
            budget=budget,
            count_tokens=None,
        )
        if not read_only:
            n = view.purge_orphans()
            if n:
                log.info("removed %d orphaned inode(s) left by a crash", n)

            def mark(t):
                t.put_cfg(S.CFG_CLEAN, b"0")
                t.put_cfg(S.CFG_MOUNT_STATUS, S.dumps(status_provider()))

            store.run_write(mark)
            store.sync()

        def on_init() -> None:
            if lifecycle is not None:  # inside FUSE init: the context names our session
                lifecycle.attach(current_session())

            def waiter() -> None:
                if wait_until_mounted(mountpoint, 30.0):
                    log.info("mounted %s at %s%s", libdir, mountpoint, recovered)
                    if on_ready is not None and not (lifecycle and lifecycle.stop_requested.is_set()):
                        on_ready()

            threading.Thread(target=waiter, name="libraryfs-ready", daemon=True).start()

        try:
            serve(
                view,
                mountpoint,
                read_only=read_only,
                allow_other=allow_other,
                timeouts_s=timeouts_s,
                on_init=on_init,
                fsname="libraryfs:" + libdir.replace(",", "\\,"),
            )
        finally:
            if lifecycle is not None:
                lifecycle.detach()
                lifecycle.send_stopping("unmounted")  # no-op if a signal already said so
        log.info("unmounted %s; flushing", mountpoint)
        if not read_only:

            def unmark(t):
                t.put_cfg(S.CFG_CLEAN, b"1")
                t.put_cfg(S.CFG_MOUNT_STATUS, S.dumps({}))

            store.run_write(unmark)
            store.sync()
        log.info("clean shutdown of %s", libdir)
        return 0
    finally:
        store.close()
        os.close(lock_fd)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the server process (foreground; logs to stderr, journald-style under systemd).

    Settings: flags > ``LIBRARYFS_*`` environment > ``<libdir>/config.toml`` > defaults
    (:mod:`libraryfs.settings`). Under systemd (``NOTIFY_SOCKET``): ``READY=1`` once the mountpoint answers,
    ``STOPPING=1`` as soon as shutdown begins, ``RELOADING=1``/``READY=1`` around a SIGHUP reload (log
    levels apply at once; mount options at the next mount). Errors: one line on stderr, exit status 1.
    """
    from libraryfs import notify
    from libraryfs.settings import configure_logging, load_settings, parse_timeouts, rows, timeouts_s

    ap = argparse.ArgumentParser(prog="libraryfs-mountd")
    ap.add_argument("libdir")
    ap.add_argument("mountpoint")
    ap.add_argument("--read-only", action="store_true", default=None)
    ap.add_argument("--allow-other", action="store_true", default=None)
    ap.add_argument("--timeouts", default=None, help="entry,attr,negative cache timeouts in seconds")
    ap.add_argument("--budget", default=None, help="reads=N,tokens=M (EDQUOT past it)")
    ap.add_argument("--log-level", default=None)
    a = ap.parse_args(argv)
    try:
        overrides = {
            "mount.read_only": a.read_only,
            "mount.allow_other": a.allow_other,
            "mount.budget": a.budget,
            "log.level": a.log_level,
            **parse_timeouts(a.timeouts),
        }
        settings = load_settings(a.libdir, overrides)
    except LibraryError as e:
        print(f"libraryfs-mountd: {e}", file=sys.stderr)
        return 1
    configure_logging(settings)
    m = settings["mount"]
    budget = None
    if m["budget"]:
        from libraryfs.fs.budget import ReadBudget, parse_budget_spec

        budget = ReadBudget(parse_budget_spec(m["budget"]))
    mountpoint = os.path.abspath(a.mountpoint)
    current = {"settings": settings}

    def reload() -> None:
        notify.reloading("reloading settings")
        new = load_settings(a.libdir, overrides)
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

    lifecycle = Lifecycle(on_reload=reload)
    lifecycle.install()

    def on_ready() -> None:
        notify.ready(f"mounted at {mountpoint}")

    try:
        return run(
            a.libdir,
            mountpoint,
            read_only=m["read_only"],
            allow_other=m["allow_other"],
            timeouts_s=timeouts_s(settings),
            budget=budget,
            on_ready=on_ready,
            lifecycle=lifecycle,
        )
    except LibraryError as e:
        print(f"libraryfs-mountd: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:
        print(f"libraryfs-mountd: mount failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
