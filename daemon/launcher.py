"""Starting and stopping a library's processes: mount server + indexer (what ``libraryfs mount`` does).

* refuses a mountpoint inside the library directory (or the library inside the mountpoint: the server
  would deadlock on its own files, cases C25), a non-empty mountpoint, a library already mounted;
* detects a stale mountpoint left by a killed server (ENOTCONN from ``statvfs``) and clears it with
  ``fusermount3 -u``, then ``-uz`` if busy (ARCHITECTURE §7);
* daemonises by spawning ``python -m libraryfs.daemon.mountd`` in a new session (never by forking a
  process that has LMDB open), waits until the mount answers, then spawns the indexer;
* ``umount`` unmounts and stops that library's indexer.

Process facts are kept in ``<libdir>/run.json``; logs go to ``<libdir>/logs/``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from libraryfs.daemon.mountd import mount_entry, wait_until_mounted
from libraryfs.errors import Busy, LibraryError, LibraryMissing
from libraryfs.fs.store import is_library
from libraryfs.layout import proc_mount


class LaunchError(LibraryError):
    """The mount or indexer could not be started (message says why, in one line)."""


def fusermount() -> str:
    """Path of ``fusermount3`` (or ``fusermount``)."""
    for name in ("fusermount3", "fusermount"):
        p = shutil.which(name)
        if p:
            return p
    raise LaunchError("fusermount3 not found: install the fuse3 package (apt-get install fuse3)")


def probe(mountpoint: str) -> str:
    """State of a mountpoint: ``"live"``, ``"stale"`` (ENOTCONN), ``"other"`` (another filesystem is
    mounted there) or ``"none"``."""
    fs = mount_entry(mountpoint)
    if fs is None:
        return "none"
    if not fs.startswith("fuse"):
        return "other"
    try:
        os.statvfs(mountpoint)
        return "live"
    except OSError as e:
        if e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO):
            return "stale"
        raise


def clear_stale(mountpoint: str) -> bool:
    """Unmount a dead FUSE mount (``fusermount3 -u``, then ``-uz``); True if one was cleared."""
    if probe(mountpoint) != "stale":
        return False
    fm = fusermount()
    for args in (["-u"], ["-uz"]):
        subprocess.run([fm, *args, mountpoint], capture_output=True)
        if probe(mountpoint) == "none":
            return True
    raise LaunchError(f"stale mount at {mountpoint} could not be cleared (try: {fm} -uz {mountpoint})")


def _within(child: str, parent: str) -> bool:
    child, parent = os.path.realpath(child), os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip("/") + "/")


def run_file(libdir: str) -> str:
    """``<libdir>/run.json``: pids and mountpoint of the running processes."""
    return os.path.join(libdir, "run.json")


def read_run(libdir: str) -> dict:
    """Contents of ``run.json`` (``{}`` if absent)."""
    try:
        with open(run_file(libdir)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write_run(libdir: str, info: dict) -> None:
    tmp = run_file(libdir) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, run_file(libdir))


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def preflight(libdir: str, mountpoint: str, *, allow_nonempty: bool = False) -> tuple[str, str]:
    """Validate a (library, mountpoint) pair; returns absolute paths. Raises :class:`LibraryError`."""
    libdir = os.path.abspath(libdir)
    mountpoint = os.path.abspath(mountpoint)
    if not is_library(libdir):
        raise LibraryMissing(f"{libdir} is not a libraryfs library (run `libraryfs init {libdir}`)")
    if _within(mountpoint, libdir):
        raise LaunchError(f"mountpoint {mountpoint} is inside the library directory {libdir}")
    if _within(libdir, mountpoint):
        raise LaunchError(f"library directory {libdir} is inside the mountpoint {mountpoint}")
    state = probe(mountpoint)  # before any stat: a stale mountpoint fails every stat with ENOTCONN
    if state == "stale":
        clear_stale(mountpoint)
        state = probe(mountpoint)
    if state == "none" and not os.path.exists(mountpoint):
        os.makedirs(mountpoint, exist_ok=True)
    if state == "live":
        raise Busy(f"{mountpoint} is already mounted")
    if state == "other":
        raise Busy(f"another filesystem is mounted at {mountpoint}")
    if not os.path.isdir(mountpoint):
        raise LaunchError(f"mountpoint {mountpoint} is not a directory")
    if os.listdir(mountpoint) and not allow_nonempty:
        raise LaunchError(f"mountpoint {mountpoint} is not empty (pass --nonempty to mount over it)")
    return libdir, mountpoint


def start(
    libdir: str,
    mountpoint: str,
    *,
    indexer: bool = True,
    read_only: bool = False,
    allow_other: bool = False,
    timeouts: str | None = None,
    budget: str | None = None,
    llm: bool | None = None,
    allow_nonempty: bool = False,
    timeout_s: float = 20.0,
    env: dict | None = None,
) -> dict:
    """Start the mount server (and the indexer) in the background; returns ``run.json`` facts.

    Raises :class:`LaunchError` with the server's own last error line if it does not come up.
    """
    if timeouts is not None:
        check_timeouts(timeouts)
    created = not os.path.exists(os.path.abspath(mountpoint))
    libdir, mountpoint = preflight(libdir, mountpoint, allow_nonempty=allow_nonempty)
    try:
        return _start(
            libdir,
            mountpoint,
            indexer=indexer,
            read_only=read_only,
            allow_other=allow_other,
            timeouts=timeouts,
            budget=budget,
            llm=llm,
            timeout_s=timeout_s,
            env=env,
        )
    except BaseException:
        if created:  # leave nothing behind for a mount that never came up
            try:
                os.rmdir(mountpoint)
            except OSError:
                pass
        raise


def check_timeouts(spec: str) -> tuple[float, float, float]:
    """Parse ``entry,attr,negative`` kernel cache timeouts (seconds, ≥ 0); :class:`LaunchError` if bad."""
    try:
        vals = tuple(float(x) for x in spec.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 3 or any(v < 0 or v != v for v in vals):
        raise LaunchError(f"--timeouts wants three non-negative seconds 'entry,attr,negative', got {spec!r}")
    return vals  # type: ignore[return-value]


def indexer_holder(libdir: str) -> int | None:
    """pid of the indexer daemon running for ``libdir`` (it holds ``indexer.lock``), or None."""
    import fcntl

    path = os.path.join(libdir, "indexer.lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            raw = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(raw) if raw.isdigit() else None
    finally:
        os.close(fd)


def _start(
    libdir: str,
    mountpoint: str,
    *,
    indexer: bool,
    read_only: bool,
    allow_other: bool,
    timeouts: str | None,
    budget: str | None,
    llm: bool | None,
    timeout_s: float,
    env: dict | None,
) -> dict:
    logs = os.path.join(libdir, "logs")
    os.makedirs(logs, mode=0o700, exist_ok=True)
    cmd = [sys.executable, "-m", "libraryfs.daemon.mountd", libdir, mountpoint]
    if timeouts:
        cmd.append("--timeouts=" + timeouts)
    if read_only:
        cmd.append("--read-only")
    if allow_other:
        cmd.append("--allow-other")
    if budget:
        cmd += ["--budget", budget]
    penv = dict(os.environ, **(env or {}))
    penv.pop("NOTIFY_SOCKET", None)
    mlog = open(os.path.join(logs, "mount.log"), "ab")  # noqa: SIM115 (handed to the child; closed below)
    server = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=mlog, stderr=mlog, start_new_session=True, env=penv
    )
    mlog.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise LaunchError(f"mount server exited: {_last_line(os.path.join(logs, 'mount.log'))}")
        if wait_until_mounted(mountpoint, 0.2):
            break
    else:
        server.terminate()
        raise LaunchError(f"mount did not come up within {timeout_s:.0f} s (see {logs}/mount.log)")
    info = {
        "libdir": libdir,
        "mountpoint": mountpoint,
        "server_pid": server.pid,
        "indexer_pid": None,
        "started": time.time(),
    }
    if indexer and not read_only:
        # an indexer left running (e.g. its mount server was killed) is adopted, not duplicated: it files
        # the inbox through the same mountpoint, which is live again
        info["indexer_pid"] = indexer_holder(libdir) or start_indexer(libdir, mountpoint, llm=llm, env=env)
    _write_run(libdir, info)
    return info


def start_indexer(
    libdir: str, mountpoint: str | None, llm: bool | None = None, env: dict | None = None
) -> int:
    """Spawn the indexer daemon for ``libdir``; returns its pid."""
    logs = os.path.join(libdir, "logs")
    os.makedirs(logs, mode=0o700, exist_ok=True)
    cmd = [sys.executable, "-m", "libraryfs.daemon.indexer", libdir]
    if mountpoint:
        cmd += ["--mountpoint", mountpoint]
    if llm is True:
        cmd.append("--llm")
    elif llm is False:
        cmd.append("--no-llm")
    ilog = open(os.path.join(logs, "indexer.log"), "ab")  # noqa: SIM115 (handed to the child; closed below)
    penv = dict(os.environ, **(env or {}))
    penv.pop("NOTIFY_SOCKET", None)
    p = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=ilog, stderr=ilog, start_new_session=True, env=penv
    )
    ilog.close()
    return p.pid


def stop(target: str, *, lazy: bool = False, timeout_s: float = 10.0) -> dict:
    """Unmount a library given its mountpoint or library directory, and stop its indexer.

    Raises :class:`Busy` if the mount is in use (pass ``lazy`` to detach anyway), :class:`LaunchError`
    if nothing is mounted there.
    """
    target = os.path.abspath(target)
    if is_library(target):
        libdir = target
        info = read_run(libdir)
        mountpoint = info.get("mountpoint")
    else:
        mountpoint = target
        libdir = _libdir_of_mount(mountpoint)
        info = read_run(libdir) if libdir else {}
    state = probe(mountpoint) if mountpoint else "none"
    if state in ("live", "stale") and not _is_libraryfs_mount(mountpoint):
        raise LaunchError(f"{mountpoint} is not a libraryfs mount")
    if state in ("live", "stale"):
        fm = fusermount()
        r = subprocess.run([fm, "-u", mountpoint], capture_output=True, text=True)
        if r.returncode != 0:
            if lazy or state == "stale":
                subprocess.run([fm, "-uz", mountpoint], capture_output=True)
            else:
                msg = (r.stderr.strip().splitlines() or ["unmount failed"])[-1]
                raise Busy(f"{msg} (close files under it, or use --lazy)")
    elif not info:
        raise LaunchError(f"nothing is mounted at {target}")
    # the server exits when unmounted; the indexer is ours to stop (whichever one really runs)
    if libdir:
        info["indexer_pid"] = indexer_holder(libdir) or info.get("indexer_pid")
    for key in ("indexer_pid", "server_pid"):
        pid = info.get(key)
        if key == "server_pid":
            _wait_exit(pid, timeout_s)
            continue
        if _pid_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _wait_exit(pid, timeout_s)
    if libdir:
        try:
            os.unlink(run_file(libdir))
        except OSError:
            pass
    return {"libdir": libdir, "mountpoint": mountpoint}


def _is_libraryfs_mount(mountpoint: str) -> bool:
    m = proc_mount(mountpoint)
    return m is not None and m[0].startswith("libraryfs:")


def _wait_exit(pid: int | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _libdir_of_mount(mountpoint: str) -> str | None:
    m = proc_mount(mountpoint)
    if m is None or not m[0].startswith("libraryfs:"):
        return None
    cand = m[0][len("libraryfs:") :].replace("\\,", ",")
    return cand if is_library(cand) else None


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        for ln in reversed(lines):
            if "libraryfs-mountd:" in ln or "Error" in ln or "error" in ln:
                return ln.split("libraryfs-mountd: ")[-1]
        return lines[-1] if lines else "no output"
    except OSError:
        return "no log"


def run_foreground(
    libdir: str,
    mountpoint: str,
    *,
    indexer: bool = True,
    read_only: bool = False,
    allow_other: bool = False,
    timeouts: str | None = None,
    budget: str | None = None,
    llm: bool | None = None,
    allow_nonempty: bool = False,
) -> int:
    """Serve in this process (systemd, ``--foreground``); the indexer runs as a child process."""
    from libraryfs.daemon import mountd

    if timeouts is not None:
        check_timeouts(timeouts)
    libdir, mountpoint = preflight(libdir, mountpoint, allow_nonempty=allow_nonempty)
    args = [libdir, mountpoint] + (["--timeouts=" + timeouts] if timeouts else [])
    if read_only:
        args.append("--read-only")
    if allow_other:
        args.append("--allow-other")
    if budget:
        args += ["--budget", budget]
    child = None
    if indexer and not read_only:
        running = indexer_holder(libdir)
        pid = running or start_indexer(libdir, mountpoint, llm=llm)
        child = None if running else pid
        _write_run(
            libdir,
            {
                "libdir": libdir,
                "mountpoint": mountpoint,
                "server_pid": os.getpid(),
                "indexer_pid": pid,
                "started": time.time(),
            },
        )
    try:
        return mountd.main(args)
    finally:
        if child and _pid_alive(child):
            os.kill(child, signal.SIGTERM)
            _wait_exit(child, 10.0)
