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
import sys
import threading
import time
from collections.abc import Callable

from libraryfs import schema as S
from libraryfs.errors import Busy, LibraryError
from libraryfs.find import find
from libraryfs.store import Store
from libraryfs.tokens import count_tokens
from libraryfs.view import LibraryView

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
    """The ``/proc/mounts`` line of ``mountpoint`` (fstype field), or None."""
    mp = os.path.realpath(mountpoint)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1].encode().decode("unicode_escape") == mp:
                    return parts[2]
    except OSError:
        pass
    return None


def is_mounted(mountpoint: str) -> bool:
    """Whether a libraryfs FUSE mount sits at ``mountpoint`` according to ``/proc/mounts``."""
    fs = mount_entry(mountpoint)
    return fs is not None and fs.startswith("fuse")


def run(libdir: str, mountpoint: str, *, read_only: bool = False, allow_other: bool = False,
        timeouts_s: tuple[float, float, float] = (1.0, 1.0, 1.0), budget=None,
        on_ready: Callable[[], None] | None = None, check_on_unclean: bool = True) -> int:
    """Serve one library until unmounted; returns a process exit status. Raises :class:`Busy` if locked."""
    from libraryfs.fuse_adapter import serve  # imports mfusepy (libfuse) only in the server

    libdir = os.path.abspath(libdir)
    mountpoint = os.path.abspath(mountpoint)
    lock_fd = acquire_lock(libdir)
    store = Store(libdir)
    try:
        with store.read() as t:
            clean = t.cfg(S.CFG_CLEAN) != b"0"
        if not clean and check_on_unclean and not read_only:
            from libraryfs.check import check
            report = check(store, repair=True)
            log.warning("unclean shutdown detected: check found %d problem(s), repaired %d",
                        len(report.problems), report.repaired)
        started = time.time()

        def status_provider() -> dict:
            return {"pid": os.getpid(), "mountpoint": mountpoint, "started": started,
                    "uptime_s": round(time.time() - started, 3), "read_only": read_only,
                    "allow_other": allow_other}

        view = LibraryView(store, read_only=read_only, finder=find, status_provider=status_provider,
                           budget=budget, count_tokens=count_tokens)
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
            def waiter() -> None:
                if wait_until_mounted(mountpoint, 30.0):
                    log.info("mounted %s at %s", libdir, mountpoint)
                    if on_ready is not None:
                        on_ready()
            threading.Thread(target=waiter, name="libraryfs-ready", daemon=True).start()

        serve(view, mountpoint, read_only=read_only, allow_other=allow_other, timeouts_s=timeouts_s,
              on_init=on_init, fsname="libraryfs:" + libdir.replace(",", "\\,"))
        if not read_only:
            def unmark(t):
                t.put_cfg(S.CFG_CLEAN, b"1")
                t.put_cfg(S.CFG_MOUNT_STATUS, S.dumps({}))
            store.run_write(unmark)
        return 0
    finally:
        store.close()
        os.close(lock_fd)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the server process (foreground; logs to stderr)."""
    ap = argparse.ArgumentParser(prog="libraryfs-mountd")
    ap.add_argument("libdir")
    ap.add_argument("mountpoint")
    ap.add_argument("--read-only", action="store_true")
    ap.add_argument("--allow-other", action="store_true")
    ap.add_argument("--timeouts", default="1,1,1", help="entry,attr,negative cache timeouts in seconds")
    ap.add_argument("--budget", default=None, help="reads=N,tokens=M (EDQUOT past it)")
    ap.add_argument("--log-level", default=os.environ.get("LIBRARYFS_LOG_LEVEL", "INFO"))
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    timeouts = tuple(float(x) for x in a.timeouts.split(","))
    budget = None
    if a.budget:
        from libraryfs.code.budget import ReadBudget, parse_budget_spec
        budget = ReadBudget(parse_budget_spec(a.budget))
    on_ready = None
    if os.environ.get("NOTIFY_SOCKET"):
        from libraryfs.notify import notify
        on_ready = lambda: notify("READY=1\nSTATUS=mounted")  # noqa: E731
    try:
        return run(a.libdir, a.mountpoint, read_only=a.read_only, allow_other=a.allow_other,
                   timeouts_s=timeouts, budget=budget, on_ready=on_ready)  # type: ignore[arg-type]
    except LibraryError as e:
        print(f"libraryfs-mountd: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:
        print(f"libraryfs-mountd: mount failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

