"""Starting and stopping a library's processes: mount server + indexer (what ``libraryfs mount`` does).

* refuses a mountpoint inside the library directory (or the library inside the mountpoint: the server
  would deadlock on its own files, cases C25), a non-empty mountpoint, a library already mounted;
* detects a stale mountpoint left by a killed server (ENOTCONN from ``statvfs``) and clears it with
  ``fusermount3 -u``, then ``-uz`` if busy (ARCHITECTURE §7);
* daemonises by spawning ``python -m libraryfs.daemon.mountd`` in a new session (never by forking a
  process that has LMDB open), waits until the mount answers, then spawns the indexer;
* ``umount`` unmounts and stops that library's indexer.

Where things are and who runs is :mod:`libraryfs.layout`'s business: process facts in ``<libdir>/run.json``,
logs in ``<libdir>/logs/``, liveness from the processes' locks and ``/proc/mounts``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time

from libraryfs.errors import Busy, Damaged, IndexerStopping, LibraryError, LibraryMissing
from libraryfs.fs.backends import is_library
from libraryfs.layout import (
    INDEXER_LOCK,
    LOCK_FD_ENV,
    MOUNT_LOCK,
    TIE_FD_ENV,
    acquire_lock,
    hand_over_lock,
    held_message,
    indexer_pid,
    is_libraryfs_mount,
    libdir_of_mount,
    lock_holder,
    lock_stopping,
    log_path,
    mount_state,
    mountpoint_of,
    pid_alive,
    read_run,
    refuse_if_stopped,
    remove_run,
    stopped_server,
    wait_exit,
    wait_until_mounted,
    write_run,
)
from libraryfs.probes import last_log_line
from libraryfs.settings import flag_argv, parse_timeouts

#: Seconds ``umount --lazy`` waits for the indexer beside a stopped mount server (it may be waiting on the
#: mount itself, then it exits only once the server runs again).
STOPPED_GRACE_S = 2.0


class LaunchError(LibraryError):
    """The mount or indexer could not be started (message says why, in one line)."""


def fusermount() -> str:
    """Path of ``fusermount3`` (or ``fusermount``). Raises :class:`LaunchError` when neither is installed."""
    for name in ("fusermount3", "fusermount"):
        p = shutil.which(name)
        if p:
            return p
    raise LaunchError("fusermount3 not found: install the fuse3 package (apt-get install fuse3)")


def clear_stale(mountpoint: str) -> bool:
    """Unmount a dead FUSE mount (``fusermount3 -u``, then ``-uz``); True if one was cleared.
    Raises :class:`LaunchError` when it cannot be cleared."""
    if mount_state(mountpoint) != "stale":
        return False
    fm = fusermount()
    for args in (["-u"], ["-uz"]):
        subprocess.run([fm, *args, mountpoint], capture_output=True)
        if mount_state(mountpoint) == "none":
            return True
    raise LaunchError(f"stale mount at {mountpoint} could not be cleared (try: {fm} -uz {mountpoint})")


def _within(child: str, parent: str) -> bool:
    child, parent = os.path.realpath(child), os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip("/") + "/")


def preflight(libdir: str, mountpoint: str, *, allow_nonempty: bool = False) -> tuple[str, str, list[str]]:
    """Validate a (library, mountpoint) pair: returns their absolute paths and the directories made here,
    deepest first (empty: the mountpoint existed; a missing one is made, with its missing parents, as
    ``mkdir -p`` would; the caller says so, and :func:`remove_made` removes them if the mount fails).
    Raises :class:`LibraryError`: :class:`~libraryfs.errors.Busy` for a library mounted already (naming its
    mountpoint and server) or a mountpoint in use, :class:`LaunchError` for a bad pair."""
    libdir = os.path.abspath(libdir)
    mountpoint = os.path.abspath(mountpoint)
    if not is_library(libdir):
        raise LibraryMissing(f"{libdir} is not a libraryfs library (run `libraryfs init {libdir}`)")
    if _within(mountpoint, libdir):
        raise LaunchError(f"mountpoint {mountpoint} is inside the library directory {libdir}")
    if _within(libdir, mountpoint):
        raise LaunchError(f"library directory {libdir} is inside the mountpoint {mountpoint}")
    refuse_if_stopped(libdir, "mount")
    _refuse_if_mounted(libdir)  # before the mountpoint is made: a refused mount leaves nothing behind
    state = mount_state(mountpoint)  # before any stat: a stale mountpoint fails every stat with ENOTCONN
    if state == "stale":
        clear_stale(mountpoint)
        state = mount_state(mountpoint)
    created: list[str] = []
    if state == "none":
        d = mountpoint
        while not os.path.lexists(d):
            created.append(d)
            d = os.path.dirname(d)
    if created:
        os.makedirs(mountpoint)
    if state == "live":
        raise Busy(f"{mountpoint} is already mounted")
    if state == "other":
        raise Busy(f"another filesystem is mounted at {mountpoint}")
    if not os.path.isdir(mountpoint):
        raise LaunchError(f"mountpoint {mountpoint} is not a directory")
    if os.listdir(mountpoint) and not allow_nonempty:
        raise LaunchError(f"mountpoint {mountpoint} is not empty (pass --nonempty to mount over it)")
    return libdir, mountpoint, created


def _refuse_if_mounted(libdir: str) -> None:
    """Raise :class:`~libraryfs.errors.Busy` when a mount server holds ``libdir``'s ``mount.lock``: ``library
    <libdir> is already mounted at <mountpoint> by pid N`` (:func:`libraryfs.layout.held_message`, what the
    server itself would say), before a mountpoint is made or a server started. Reads only the lock file and
    ``/proc``."""
    try:
        pid = lock_holder(libdir, MOUNT_LOCK)
    except OSError:  # an unreadable lock file: the mount server's own lock decides
        return
    if pid is not None:
        raise Busy(held_message(libdir, MOUNT_LOCK, pid))


def remove_made(made: list[str]) -> None:
    """Remove the directories :func:`preflight` made for a mount that never came up (deepest first),
    leaving nothing behind; one that cannot be removed (not empty: used meanwhile) ends it, silently."""
    for d in made:
        try:
            os.rmdir(d)
        except OSError:
            return


def mount_overrides(
    read_only: bool = False, allow_other: bool = False, timeouts: str | None = None, budget: str | None = None
) -> dict:
    """The mount server's flag settings (dotted keys, None = not given) for ``libraryfs mount``'s options.
    Raises :class:`~libraryfs.settings.SettingsError` on a bad ``timeouts`` (``E,A,N`` seconds)."""
    return {
        "mount.read_only": read_only or None,
        "mount.allow_other": allow_other or None,
        "mount.budget": budget,
        **parse_timeouts(timeouts),
    }


def _spawn(
    argv: list[str], log: str, env: dict | None, lock_fd: int | None = None, tie_fd: int | None = None
) -> subprocess.Popen:
    """Start ``python -P -m <argv>`` in a new session, stdout/stderr appended to ``log``, no NOTIFY_SOCKET;
    ``-P`` (Python 3.11+, the oldest supported): the cwd is not put on the child's ``sys.path``, so a
    ``libraryfs/`` folder where the user runs ``libraryfs mount`` does not shadow the package (before: the
    server died with "ImportError: cannot import name '__version__' from 'libraryfs'");
    ``lock_fd``: a held lock the child inherits and adopts (:func:`libraryfs.layout.adopt_lock`);
    ``tie_fd``: the read end of a :func:`libraryfs.layout.tie_pipe` the child watches."""
    penv = dict(os.environ, **(env or {}))
    penv.pop("NOTIFY_SOCKET", None)
    penv.pop(LOCK_FD_ENV, None)
    penv.pop(TIE_FD_ENV, None)
    if lock_fd is not None:
        penv[LOCK_FD_ENV] = str(lock_fd)
    if tie_fd is not None:
        penv[TIE_FD_ENV] = str(tie_fd)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=penv,
            pass_fds=tuple(fd for fd in (lock_fd, tie_fd) if fd is not None),
        )
    if lock_fd is not None:
        hand_over_lock(lock_fd, proc.pid)
    return proc


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
    overrides: dict | None = None,
) -> dict:
    """Start the mount server (and the indexer) in the background; returns the ``run.json`` facts
    (``libdir``, ``mountpoint``, ``server_pid``, ``indexer_pid``, ``started``) and ``created_mountpoint``
    (True: the mountpoint did not exist and was made; it is removed again if the mount fails).

    The server's settings come from the keyword flags and ``overrides`` (dotted keys, as the CLI's flags
    give them; they win). Raises :class:`LaunchError` with the server's own last error line if it does not
    come up within ``timeout_s`` seconds, :class:`~libraryfs.settings.SettingsError` on a bad ``timeouts``.
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    overrides = {**mount_overrides(read_only, allow_other, timeouts, budget), **given}
    read_only = bool(overrides["mount.read_only"])
    refuse_if_stopped(os.path.abspath(libdir), "mount")  # before the stat below: it would wait on its mount
    libdir, mountpoint, created = preflight(libdir, mountpoint, allow_nonempty=allow_nonempty)
    # an indexer left running (e.g. its mount server was killed) is adopted, not duplicated: it files the
    # inbox through the same mountpoint, which is live again; one shutting down is waited for, then
    # replaced. Otherwise its lock is taken now, before the mount answers, and handed to the indexer: no
    # reader sees "not running" while it starts up.
    lock_fd = None
    try:  # until the server answers, a failure leaves nothing behind: the mountpoint made goes again
        if indexer and not read_only:  # the indexer's settings too: a bad one must fail the mount
            _check_indexer_settings(libdir)  # not the indexer after `mount` said "mounted" (issue 14)
        running, lock_fd = _claim_indexer(libdir, timeout_s) if indexer and not read_only else (None, None)
        info = _start_server(libdir, mountpoint, overrides, timeout_s, env)
    except BaseException:
        remove_made(created)
        if lock_fd is not None:
            os.close(lock_fd)
        raise
    started = None
    try:  # the mount answers: a failure from here on unmounts it and stops what was started (trial 1203b)
        try:
            if lock_fd is not None:
                started = start_indexer(libdir, mountpoint, llm=llm, env=env, lock_fd=lock_fd)
                info["indexer_pid"] = started
            elif running:
                info["indexer_pid"] = running
                info["indexer_adopted"] = True  # not this mount's: when it stops, the mount starts its own
            info["indexer_llm"] = llm  # the server starts a dead indexer again with it (daemon.indexwatch)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # the indexer holds it now (or, if it never started, nobody does)
        write_run(libdir, info)
    except BaseException as e:
        _undo_start(mountpoint, info["server_pid"], started, created, timeout_s)
        if isinstance(e, OSError):  # run.json on a full disk: it named its file, say the mount is gone too
            where = f": {e.filename}" if e.filename else ""
            raise LaunchError(
                f"cannot record the mount: {e.strerror or e}{where}; the mount was undone (nothing is left "
                f"mounted or running)"
            ) from None
        raise
    return {**info, "created_mountpoint": bool(created)}


def _undo_start(
    mountpoint: str, server_pid: int, indexer: int | None, created: list[str], timeout_s: float
) -> None:
    """Take back a mount that answered but could not be completed (its indexer not started, ``run.json`` not
    written — a full disk): stop the ``indexer`` pid this mount started (SIGTERM; an adopted one is left
    running), unmount ``mountpoint`` (``fusermount3 -u``, then ``-uz``), wait up to ``timeout_s`` seconds for
    the server ``server_pid`` to exit (then SIGTERM it), and remove the directories :func:`preflight` made.
    Before, `mount` said "Error: No space left on device … run.json.tmp", exit 1, and left the mount, its
    server and its indexer running."""
    if indexer and pid_alive(indexer):
        with contextlib.suppress(ProcessLookupError):
            os.kill(indexer, signal.SIGTERM)
        wait_exit(indexer, timeout_s)
    if is_libraryfs_mount(mountpoint):
        fm = fusermount()
        if subprocess.run([fm, "-u", mountpoint], capture_output=True).returncode != 0:
            subprocess.run([fm, "-uz", mountpoint], capture_output=True)
    if not wait_exit(server_pid, timeout_s):
        with contextlib.suppress(ProcessLookupError):
            os.kill(server_pid, signal.SIGTERM)
        wait_exit(server_pid, timeout_s)
    remove_made(created)


def _check_indexer_settings(libdir: str) -> None:
    """Load the settings the indexer will load (``[mount]``, ``[index]``, ``[log]``, ``[llm]``) and raise
    their :class:`~libraryfs.settings.SettingsError` now: `mount` said "mounted" and the indexer then died
    on ``[llm] base_url = 5``."""
    from libraryfs.settings import PROCESS_TABLES, load_settings

    load_settings(libdir, tables=(*PROCESS_TABLES, "llm"))


def _claim_indexer(libdir: str, timeout_s: float = 20.0) -> tuple[int | None, int | None]:
    """``(pid of a running indexer, None)`` to adopt it, else ``(None, fd)``: ``indexer.lock`` taken for the
    indexer about to be started (:func:`start_indexer` hands it over). A lock taken meanwhile by another
    process (a ``libraryfs index`` pass) is that process's: its pid is returned.

    An indexer shutting down (SIGTERM from ``umount``; its lock file says ``<pid> stopping``:
    :func:`libraryfs.layout.lock_stopping`) is never adopted — it would exit under the new mount, leaving it
    without one: this waits up to ``timeout_s`` seconds for it to exit, then takes the lock; raises
    :class:`~libraryfs.errors.IndexerStopping` (exit status 10) if it is still there."""
    dying = lock_stopping(libdir, INDEXER_LOCK)
    if dying and not wait_exit(dying, timeout_s):
        raise IndexerStopping(
            f"the indexer of {libdir} (pid {dying}) is still shutting down after {timeout_s:.0f} s; "
            f"mount again once it has exited"
        )
    running = indexer_pid(libdir)
    if running:
        return running, None
    try:
        return None, acquire_lock(libdir, INDEXER_LOCK)
    except Busy:
        return indexer_pid(libdir), None


def _start_server(libdir: str, mountpoint: str, overrides: dict, timeout_s: float, env: dict | None) -> dict:
    """Spawn the mount server and wait until the mountpoint answers; returns the ``run.json`` facts."""
    log = log_path(libdir, "mount")
    start = _log_size(log)  # what an earlier server wrote is not this one's error
    server = _spawn(["libraryfs.daemon.mountd", libdir, mountpoint, *flag_argv(overrides)], log, env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rc = server.poll()
        if rc is not None:
            raise _server_error(rc, _last_line(log, start))
        if wait_until_mounted(mountpoint, 0.2):
            break
    else:
        server.terminate()
        raise LaunchError(f"mount did not come up within {timeout_s:.0f} s (see {log})")
    return {
        "libdir": libdir,
        "mountpoint": mountpoint,
        "server_pid": server.pid,
        "indexer_pid": None,
        "started": time.time(),
    }


def start_indexer(
    libdir: str,
    mountpoint: str | None,
    llm: bool | None = None,
    env: dict | None = None,
    lock_fd: int | None = None,
    tie_fd: int | None = None,
) -> int:
    """Spawn the indexer daemon for ``libdir`` (its output appended to ``logs/indexer.log``); returns its pid.
    ``lock_fd``: ``indexer.lock``, already taken by the caller, which the indexer inherits and keeps.
    ``tie_fd``: the read end of a :func:`libraryfs.layout.tie_pipe` whose write end the caller keeps: the
    indexer stops (as on SIGTERM) when that end closes, i.e. when the caller exits or is killed. Without
    it the indexer outlives its starter (``libraryfs mount`` exits after starting it)."""
    argv = ["libraryfs.daemon.indexer", libdir]
    if mountpoint:
        argv += ["--mountpoint", mountpoint]
    if llm is not None:
        argv.append("--llm" if llm else "--no-llm")
    return _spawn(argv, log_path(libdir, "indexer"), env, lock_fd, tie_fd).pid


def stop(target: str, *, lazy: bool = False, timeout_s: float = 10.0) -> dict:
    """Unmount a library given its mountpoint or library directory, and stop its indexer; returns
    ``{"libdir", "mountpoint", "stopped_server", "indexer_waiting", "was_mounted", "indexer_stopped"}``
    (``(pid, how)`` of a stopped server left stopped, else None; the pid of an indexer still waiting on that
    server's mount after SIGTERM and :data:`STOPPED_GRACE_S` seconds, else None; whether anything was
    mounted — a ``run.json`` left by an unmount with the system's tools names a mount that is gone; the
    pid of the indexer stopped, else None).

    A stopped mount server (SIGSTOP, a debugger) would make every request to its mount wait, the
    unmount's included: without ``lazy`` that is :class:`~libraryfs.errors.ServerStopped` before the mount
    is touched; with ``lazy`` the mount is detached (``fusermount3 -u -z``) and the server left stopped (it
    exits once continued). Raises :class:`Busy` if the mount is in use (pass ``lazy`` to detach anyway),
    :class:`LaunchError` if nothing is mounted there, :class:`~libraryfs.errors.IndexerStopping` (exit
    status 10) when the mount is gone but the indexer has not exited ``timeout_s`` seconds after SIGTERM.
    """
    target = os.path.abspath(target)
    if not is_libraryfs_mount(target) and is_library(target):  # a mountpoint first: its content may hold
        libdir: str | None = target  # a store/data.mdb file of its own
        info = read_run(target)
        mountpoint = info.get("mountpoint")
    else:
        mountpoint = target
        libdir = libdir_of_mount(mountpoint)
        info = read_run(libdir) if libdir else {}
    stopped = stopped_server(libdir) if libdir else None
    if stopped and not lazy:
        refuse_if_stopped(libdir, "umount")
    mountpoint = mountpoint or (mountpoint_of(libdir) if stopped else None)
    if stopped:  # asking the mount anything would wait for the server: detach it unasked
        state = "none"
        if mountpoint and is_libraryfs_mount(mountpoint):
            subprocess.run([fusermount(), "-u", "-z", mountpoint], capture_output=True)
            info = info or {"mountpoint": mountpoint}
    else:
        state = mount_state(mountpoint) if mountpoint else "none"
    if state in ("live", "stale"):
        if not is_libraryfs_mount(mountpoint):
            raise LaunchError(f"{mountpoint} is not a libraryfs mount")
        _unmount(mountpoint, lazy=lazy or state == "stale")
    elif not info:
        what = (
            f"the library {target} is not mounted"
            if is_library(target)
            else f"nothing is mounted at {target}"
        )
        raise LaunchError(what)
    # the server exits when unmounted; the indexer is ours to stop (whichever one really runs)
    if libdir:
        info["indexer_pid"] = indexer_pid(libdir) or info.get("indexer_pid")
    ipid = info.get("indexer_pid")
    exited, signalled = True, None
    if pid_alive(ipid):
        try:
            os.kill(ipid, signal.SIGTERM)
            signalled = ipid
        except ProcessLookupError:
            pass
        # beside a stopped server it may be waiting on the mount's answer: it exits once the server runs
        exited = wait_exit(ipid, STOPPED_GRACE_S if stopped else timeout_s)
    if not stopped:  # a stopped server exits once continued
        wait_exit(info.get("server_pid"), timeout_s)
    _stop_local_model(info.get("llm_pid"), timeout_s)
    if libdir:
        remove_run(libdir)
    waiting = ipid if stopped and pid_alive(ipid) else None
    if not exited and not stopped and pid_alive(ipid):  # unmounted, but its indexer is still finishing
        raise IndexerStopping(
            f"unmounted {mountpoint or libdir}, but its indexer (pid {ipid}) is still shutting down after "
            f"{timeout_s:.0f} s; a mount started now waits for it to exit"
        )
    return {
        "libdir": libdir,
        "mountpoint": mountpoint,
        "stopped_server": stopped,
        "indexer_waiting": waiting,
        "was_mounted": bool(stopped) or state in ("live", "stale"),
        "indexer_stopped": signalled,
    }


def _stop_local_model(pid: int | None, timeout_s: float) -> None:
    """Stop the local model ``libraryfs demo --llm local`` started for this mount (``run.json`` ``llm_pid``),
    if that pid still is a ``llama_cpp.server`` (a pid reused by another process is left alone)."""
    if not pid or not pid_alive(pid):
        return
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"llama_cpp.server" not in f.read():
                return
        os.kill(pid, signal.SIGTERM)
    except (OSError, ProcessLookupError):
        return
    wait_exit(pid, timeout_s)


def _unmount(mountpoint: str, lazy: bool) -> None:
    """``fusermount3 -u``; on failure ``-uz`` when ``lazy``, else :class:`Busy` with fusermount's reason."""
    fm = fusermount()
    r = subprocess.run([fm, "-u", mountpoint], capture_output=True, text=True)
    if r.returncode == 0:
        return
    if lazy:
        subprocess.run([fm, "-uz", mountpoint], capture_output=True)
        return
    msg = (r.stderr.strip().splitlines() or ["unmount failed"])[-1]
    raise Busy(f"{msg} (close files under it, or use --lazy)")


def _log_size(path: str) -> int:
    """Bytes in the log at ``path`` now (0 when absent)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _server_error(rc: int, line: str) -> LibraryError:
    """The error of a mount server that exited with status ``rc`` (negative: killed by a signal) after
    writing ``line`` last: its own exit status (4 for a damaged store) and message."""
    if rc < 0:
        sig = signal.Signals(-rc).name
        err = LaunchError(f"mount server died of {sig}" + (f" after: {line}" if line != "no output" else ""))
        if sig in ("SIGBUS", "SIGSEGV", "SIGABRT"):  # LMDB on a damaged file; run `libraryfs check`
            err = Damaged(f"{err}; the library's store may be damaged: run `libraryfs check`")
        return err
    err = LaunchError(f"mount server exited: {line}")
    err.exit_code = rc if rc > 1 else 1
    return err


def _last_line(path: str, start: int = 0) -> str:
    """The mount server's last error line in its log after byte ``start`` (``"no output"``/``"no log"`` when
    there is none), without its ``libraryfs-mountd: `` prefix."""
    line = last_log_line(path, start=start, prefer=_is_error_line)
    if not line and _disk_full(path):  # its own error line could not be written either
        return f"{os.strerror(errno.ENOSPC)}: {path} (the server could not write its log; free space there)"
    if line is None:
        return "no log"
    return line.split("libraryfs-mountd: ")[-1] if line else "no output"


def _disk_full(path: str) -> bool:
    """Whether the filesystem holding ``path`` (or its directory) has no block left for this user."""
    try:
        st = os.statvfs(path if os.path.exists(path) else os.path.dirname(path))
    except OSError:
        return False
    return st.f_bavail == 0


def _is_error_line(line: str) -> bool:
    """Whether a mount server's log line says what went wrong (its own one-line error, an exception)."""
    return "libraryfs-mountd:" in line or "Error" in line or "error" in line


def run_foreground(
    libdir: str,
    mountpoint: str,
    *,
    indexer: bool = True,
    overrides: dict | None = None,
    llm: bool | None = None,
    allow_nonempty: bool = False,
) -> int:
    """Serve in this process (systemd, ``--foreground``); the indexer runs as a child process.
    ``overrides``: the mount's flag settings (:func:`mount_overrides`, plus ``log.level``). Returns the exit
    status; raises :class:`LibraryError` when the server cannot start."""
    from libraryfs.daemon import mountd

    libdir, mountpoint, created = preflight(libdir, mountpoint, allow_nonempty=allow_nonempty)
    if created:  # stdout: the terminal, or the journal under systemd
        print(f"created mountpoint {mountpoint}", flush=True)
    read_only = bool((overrides or {}).get("mount.read_only"))
    child = adopted = None
    if indexer and not read_only:
        try:
            _check_indexer_settings(libdir)
            running, lock_fd = _claim_indexer(libdir)  # the lock is held from before the mount
        except BaseException:
            remove_made(created)
            raise
        try:
            pid = running or start_indexer(libdir, mountpoint, llm=llm, lock_fd=lock_fd)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
        child, adopted = (None, running) if running else (pid, None)
        info = {"libdir": libdir, "mountpoint": mountpoint, "server_pid": os.getpid(), "indexer_pid": pid}
        try:
            write_run(
                libdir, {**info, "indexer_llm": llm, "indexer_adopted": bool(running), "started": time.time()}
            )
        except OSError as e:  # a full disk: stop the indexer started for it, nothing is mounted yet
            if child and pid_alive(child):
                os.kill(child, signal.SIGTERM)
                wait_exit(child, 10.0)
            remove_made(created)
            raise LaunchError(f"{e.strerror or e}: {e.filename}; nothing was mounted") from None
    try:
        try:
            return mountd.run_process(libdir, mountpoint, overrides)
        except LibraryError:  # it could not start (a bad setting, a damaged store): leave nothing behind
            remove_made(created)
            raise
    finally:
        # ours: the one started above, or one the server started in place of a dead one (run.json names it;
        # daemon.indexwatch); an indexer this mount adopted was running before it and is left running
        run = read_run(libdir)
        current = run.get("indexer_pid") if run.get("server_pid") == os.getpid() else child
        if current and current != adopted and pid_alive(current):
            os.kill(current, signal.SIGTERM)
            wait_exit(current, 10.0)
