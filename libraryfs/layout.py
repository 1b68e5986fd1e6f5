"""The library directory: where its files are, its locks, and the state of the processes serving it.

One owner for everything a process needs to know about another one::

    <libdir>/
      store/            the LMDB environment (:mod:`libraryfs.fs.store`)
      config.toml       settings (:mod:`libraryfs.settings`)
      logs/mount.log    stderr of a background mount server (``libraryfs mount``)
      logs/indexer.log  stderr of a background indexer
      mount.lock        flock(LOCK_EX) held by the mount server; holds its pid
      indexer.lock      held by the indexer daemon or ``libraryfs index``; holds its pid
      <view>.lock       held while a derived view is written (``episodes.lock``): one writer per view
      run.json          pids and mountpoint recorded by ``libraryfs mount``
      terms.sqlite      the finder's term index (SQLite FTS5, WAL; derived: :mod:`libraryfs.index.termindex`)

(logs, locks and ``run.json`` move to a per-user runtime directory when the library directory cannot be
written: :func:`state_dir`.)

A lock is an exclusive ``flock(2)`` on its file, taken without blocking by a process (:func:`acquire_lock`,
:class:`~libraryfs.errors.Busy` names the holder's pid) or, for a derived view, waited for
(:func:`view_writer`). Whether a process runs is read from its lock, never from a pid file alone: a lock
dies with its process. Mount state comes from ``/proc/mounts`` (:func:`proc_mounts`, the one parser) and a
``statvfs(2)`` probe (ENOTCONN: a stale mount left by a killed server, ARCHITECTURE §7).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import time
from collections.abc import Iterator

from libraryfs.errors import Busy, LibraryError, ServerStopped
from libraryfs.fs import schema as S
from libraryfs.fs.backends import is_library
from libraryfs.fs.store import Store
from libraryfs.probes import process_state, real_path_untouched, stopped_how
from libraryfs.words import count

CONFIG_FILE = "config.toml"
LOGS_DIR = "logs"
RUN_FILE = "run.json"
MOUNT_LOCK = "mount.lock"  #: held by the mount server (``libraryfs.daemon.mountd``)
VERIFIED_FILE = "store-verified.json"  #: the data file's state at the last clean page walk (``status``)
INDEXER_LOCK = "indexer.lock"  #: held by the indexer daemon and by ``libraryfs index``
DEVICE_PREFIX = "libraryfs:"  #: ``/proc/mounts`` device field of our mounts: ``libraryfs:<libdir>``
TERM_INDEX = "terms.sqlite"  #: the finder's term index, written by the indexer only
_LOCK_VERBS = {MOUNT_LOCK: "mounted", INDEXER_LOCK: "indexed"}


# -- paths -------------------------------------------------------------------------------------------------
def config_path(libdir: str) -> str:
    """``<libdir>/config.toml`` (absolute)."""
    return os.path.join(os.path.abspath(libdir), CONFIG_FILE)


def state_dir(libdir: str) -> str:
    """Where the processes of ``libdir`` keep their locks, logs and ``run.json``: the library directory
    itself, or — when it cannot be written (a read-only filesystem or directory, which can still be mounted
    with ``--read-only``) — ``$XDG_RUNTIME_DIR/libraryfs/<hash of its path>`` (else under the temporary
    directory, per user), created 0700. Every process of one library computes the same place."""
    libdir = os.path.abspath(libdir)
    if os.access(libdir, os.W_OK) or not os.path.isdir(libdir):
        return libdir
    import hashlib
    import tempfile

    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(
        tempfile.gettempdir(), f"libraryfs-{os.getuid()}"
    )
    d = os.path.join(base, "libraryfs", hashlib.sha256(os.fsencode(libdir)).hexdigest()[:16])
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def log_path(libdir: str, process: str) -> str:
    """``logs/<process>.log`` in :func:`state_dir` (``process``: ``"mount"`` or ``"indexer"``); creates
    ``logs/`` (0700)."""
    logs = os.path.join(state_dir(libdir), LOGS_DIR)
    os.makedirs(logs, mode=0o700, exist_ok=True)
    return os.path.join(logs, f"{process}.log")


def term_index_path(libdir: str) -> str:
    """``<libdir>/terms.sqlite`` (absolute): the term index behind ``find`` (its ``-wal``/``-shm`` beside it)."""
    return os.path.join(os.path.abspath(libdir), TERM_INDEX)


def lock_path(libdir: str, name: str) -> str:
    """Path of the lock file ``name`` (:data:`MOUNT_LOCK`, :data:`INDEXER_LOCK`, ``"<view>.lock"``) in
    :func:`state_dir`."""
    return os.path.join(state_dir(libdir), name)


# -- locks -------------------------------------------------------------------------------------------------
def acquire_lock(libdir: str, name: str) -> int:
    """Take the lock ``name`` of a library without waiting; returns its fd (close it to release).

    The file gets the holder's pid. Raises :class:`~libraryfs.errors.Busy` naming the holder's pid
    (``library /…/notes is already mounted by pid 1234``) when another process holds it, ``OSError`` when
    the file cannot be created (e.g. a read-only library directory).
    """
    fd = os.open(lock_path(libdir, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            words = os.pread(fd, 64, 0).decode(errors="replace").split() or ["?"]
            holder = words[0] + (" (shutting down)" if words[1:2] == ["stopping"] else "")
        finally:
            os.close(fd)
        raise Busy(held_message(libdir, name, holder)) from None
    try:
        hand_over_lock(fd, os.getpid())
    except OSError as e:  # a full disk: say which file (pwrite's error names none)
        os.close(fd)
        raise OSError(e.errno, e.strerror, lock_path(libdir, name)) from None
    return fd


def held_message(libdir: str, name: str, holder: int | str) -> str:
    """What a refused lock ``name`` of ``libdir`` says: ``library /…/notes is already mounted at /mnt/notes
    by pid 1234`` (the mountpoint, for ``mount.lock``, from ``/proc/mounts``: nothing is asked of the mount;
    left out when none is listed, e.g. a mount detached lazily); ``… is already indexed by pid 1234``."""
    libdir = os.path.abspath(libdir)
    what = _LOCK_VERBS.get(name, f"locked ({name})")
    where = mountpoint_of(libdir) if name == MOUNT_LOCK else None
    return f"library {libdir} is already {what}{f' at {where}' if where else ''} by pid {holder}"


def mountpoint_of(libdir: str) -> str | None:
    """Where ``/proc/mounts`` lists a libraryfs mount of ``libdir`` (its device field), or None. Reads only
    ``/proc/mounts``: never touches the mount (its server may be stopped)."""
    libdir = os.path.abspath(libdir)
    for dev, where, _fstype in proc_mounts():
        if dev.startswith(DEVICE_PREFIX) and dev[len(DEVICE_PREFIX) :].replace("\\,", ",") == libdir:
            return where
    return None


#: Environment variable through which a launcher hands a held lock's fd to the process it starts
#: (:func:`adopt_lock`): the indexer's lock is taken before the mount comes up, so that no reader of the
#: mount ever sees "the indexer is not running" while it is starting.
LOCK_FD_ENV = "LIBRARYFS_LOCK_FD"


def hand_over_lock(fd: int, pid: int) -> None:
    """Record ``pid`` as the holder of the lock ``fd`` (taken by :func:`acquire_lock`, inherited by ``pid``
    through ``pass_fds`` and ``LIBRARYFS_LOCK_FD``); the caller then closes its own copy.

    A reader (:func:`lock_holder`) may look at any moment, so the file never reads as naming no holder or a
    pid nobody wrote: it is one record of :data:`LOCK_RECORD` bytes, written over in place, and its size
    never changes. (Linux orders a read against neither a truncate nor a write that grows the file: the old
    ``truncate, then write`` left the file empty for a moment, and a write growing it can show its first
    bytes before its size — ``10`` growing to ``1000010`` read as ``100``.) Writing the pid already there is
    a no-op. Raises ``OSError``."""
    _write_lock_record(fd, f"{pid}\n")


#: Bytes of a lock file's record (``<pid>\n`` or ``<pid> stopping\n``, blank-padded): fixed, so that a
#: rewrite never changes the file's size (:func:`hand_over_lock`)
LOCK_RECORD = 32


def _write_lock_record(fd: int, text: str) -> None:
    """Write ``text`` as the lock file's record, in place (:func:`hand_over_lock`). Raises ``OSError``."""
    new = text.encode().ljust(LOCK_RECORD, b" ")
    old = os.pread(fd, 4096, 0)
    if old == new:
        return
    os.pwrite(fd, new, 0)
    if len(old) > LOCK_RECORD:  # a longer file of an older release: cut once
        os.ftruncate(fd, LOCK_RECORD)


def mark_lock_stopping(fd: int) -> None:
    """Record in the held lock ``fd`` that its holder is shutting down (``<pid> stopping``): it still holds
    the lock until it exits, but a launcher must not adopt it (:func:`lock_stopping`). Raises ``OSError``."""
    _write_lock_record(fd, f"{os.getpid()} stopping\n")


def adopt_lock(libdir: str, name: str) -> int:
    """The lock ``name`` of ``libdir``: the one a launcher handed over in ``$LIBRARYFS_LOCK_FD`` when that fd
    is this lock's file (flock(2) locks belong to the open file description, which fork/exec share), else
    :func:`acquire_lock`. The variable is removed, so this process's children do not inherit the claim.
    Raises what :func:`acquire_lock` raises."""
    raw = os.environ.pop(LOCK_FD_ENV, "")
    if raw.isdigit():
        fd = int(raw)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock_path(libdir, name)))
        except OSError:
            same = False
        if same:
            os.set_inheritable(fd, False)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours already: a no-op that proves it
            hand_over_lock(fd, os.getpid())
            return fd
    return acquire_lock(libdir, name)


#: Environment variable through which a starter hands the process it starts the read end of a pipe whose
#: write end only the starter holds (:func:`tie_pipe`, :func:`take_tie`): the child sees EOF on it when the
#: starter is gone, however it died (``kill -9`` included), and stops instead of outliving it.
TIE_FD_ENV = "LIBRARYFS_TIE_FD"


def tie_pipe() -> tuple[int, int]:
    """``(read_fd, write_fd)`` of a new pipe tying a child to its starter. Hand ``read_fd`` to the child
    (``pass_fds`` and :data:`TIE_FD_ENV`) and close it; keep ``write_fd`` open for as long as the child may
    run (close it to release the child). Both ends are close-on-exec, so no other child inherits the write
    end (one leaked copy would keep the pipe open). Why a pipe and not ``PR_SET_PDEATHSIG``: the death
    signal follows the *thread* that forked the child (prctl(2)), so a starter that spawns from a worker
    thread would kill its child when that thread ends, and setting it needs a ``preexec_fn`` (unsafe in a
    threaded process) or leaves a window after ``exec``; a pipe's EOF is the kernel closing the last write
    end at process exit, for any thread layout and any cause of death (pipe(7))."""
    return os.pipe()


def take_tie() -> int | None:
    """The read end a starter handed over in ``$LIBRARYFS_TIE_FD`` (see :func:`tie_pipe`), or None. The
    variable is removed and the fd made close-on-exec, so this process's children do not inherit the tie."""
    raw = os.environ.pop(TIE_FD_ENV, "")
    if not raw.isdigit():
        return None
    fd = int(raw)
    try:
        os.set_inheritable(fd, False)
    except OSError:  # not an open fd: nothing ties this process
        return None
    return fd


def wait_untied(fd: int) -> None:
    """Block until the starter's end of the tie ``fd`` is closed (EOF; nothing is ever written), then close
    ``fd``. Returns at once if ``fd`` is not readable."""
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _held_lock_words(libdir: str, name: str) -> list[str] | None:
    """The words the holder of the lock ``name`` wrote in its file (``["1234"]``, ``["1234", "stopping"]``;
    ``[]`` when it wrote none), or None when nobody holds it. Raises ``OSError`` when the lock file exists
    but cannot be probed (e.g. permissions)."""
    try:
        fd = os.open(lock_path(libdir, name), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            # a read beside the holder's rewrite of its record (same size, in place) may still be torn in
            # the middle of the copy, so the words count once two reads in a row agree
            last = os.pread(fd, LOCK_RECORD, 0)
            for _ in range(8):
                now = os.pread(fd, LOCK_RECORD, 0)
                if now == last:
                    break
                last = now
            return last.decode(errors="replace").split()
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_holder(libdir: str, name: str) -> int | None:
    """pid of the process holding the lock ``name`` of ``libdir``, or None when nobody holds it.

    Raises ``OSError`` when the lock file exists but cannot be probed (e.g. permissions); a held lock
    whose file names no pid gives ``-1``.
    """
    words = _held_lock_words(libdir, name)
    if words is None:
        return None
    return int(words[0]) if words and words[0].isdigit() else -1


def lock_stopping(libdir: str, name: str) -> int | None:
    """pid of the holder of the lock ``name`` when it has marked itself as shutting down
    (:func:`mark_lock_stopping`), else None (not held, held by a running process, or not probed)."""
    try:
        words = _held_lock_words(libdir, name)
    except OSError:
        return None
    if words and len(words) > 1 and words[0].isdigit() and words[1] == "stopping":
        return int(words[0])
    return None


def indexer_pid(libdir: str) -> int | None:
    """pid of the indexer running for ``libdir`` (it holds :data:`INDEXER_LOCK`), or None."""
    try:
        pid = lock_holder(libdir, INDEXER_LOCK)
    except OSError:
        return None
    return pid if pid and pid > 0 else None


def indexer_running(libdir: str) -> bool:
    """Whether an indexer holds ``<libdir>/indexer.lock``. No lock file: not running. A lock that cannot
    be probed counts as running (the mount then claims no staleness it cannot see)."""
    try:
        return lock_holder(libdir, INDEXER_LOCK) is not None
    except OSError:
        return True


@contextlib.contextmanager
def view_writer(libdir: str, view: str, *, wait: bool = True) -> Iterator[bool]:
    """Hold ``<libdir>/<view>.lock`` while writing the derived view ``view`` (``"episodes"``): one writer
    at a time across processes and threads (each call opens its own file description, flock(2)).

    ``wait=True`` blocks until the lock is free and yields True; ``wait=False`` yields False at once when
    another writer holds it (the caller retries later). Raises ``OSError`` when the lock file cannot be
    created.
    """
    fd = os.open(lock_path(libdir, f"{view}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield True
    finally:
        os.close(fd)  # releases the flock


# -- mount state -------------------------------------------------------------------------------------------
def proc_mounts() -> list[tuple[str, str, str]]:
    """``(device, mountpoint, fstype)`` of every line of ``/proc/mounts``, octal escapes (``\\040``)
    decoded byte-exactly. The device of a libraryfs mount is ``libraryfs:<library directory>``."""

    def unescape(field: bytes) -> str:
        """Decode a /proc/mounts field: octal escapes (``\\040`` for a space) back to bytes, then fsdecode."""
        return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field))

    out = []
    try:
        with open("/proc/mounts", "rb") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    out.append((unescape(parts[0]), unescape(parts[1]), unescape(parts[2])))
    except OSError:
        pass
    return out


def proc_mount(mountpoint: str, resolve: bool = True) -> tuple[str, str] | None:
    """``(device, fstype)`` of what is mounted at ``mountpoint`` (the last mount wins), or None.
    ``resolve=False``: ``mountpoint`` is already a real path. Resolving it never ``lstat``s a listed
    mountpoint (:func:`~libraryfs.probes.real_path_untouched`: that would wait on a stopped server)."""
    mounts = proc_mounts()
    mp = real_path_untouched(mountpoint, {m[1] for m in mounts}) if resolve else mountpoint
    found = None
    for dev, where, fstype in mounts:
        if where == mp:
            found = (dev, fstype)
    return found


def is_libraryfs_mount(mountpoint: str) -> bool:
    """Whether ``/proc/mounts`` lists a libraryfs FUSE mount at ``mountpoint`` (live or stale)."""
    m = proc_mount(mountpoint)
    return m is not None and m[0].startswith(DEVICE_PREFIX)


def libdir_of_mount(mountpoint: str) -> str | None:
    """The library directory served at ``mountpoint`` (from the device field), or None."""
    m = proc_mount(mountpoint)
    if m is None or not m[0].startswith(DEVICE_PREFIX):
        return None
    cand = m[0][len(DEVICE_PREFIX) :].replace("\\,", ",")
    return cand if is_library(cand) else None


def mount_state(mountpoint: str) -> str:
    """State of a mountpoint: ``"live"`` (a FUSE mount that answers), ``"stale"`` (ENOTCONN: its server
    died), ``"other"`` (another filesystem is mounted there) or ``"none"``. Raises ``OSError`` on any other
    ``statvfs`` failure."""
    m = proc_mount(mountpoint)
    if m is None:
        return "none"
    if not m[1].startswith("fuse"):
        return "other"
    try:
        os.statvfs(mountpoint)
        return "live"
    except OSError as e:
        if e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO):
            return "stale"
        raise


def is_live(mountpoint: str) -> bool:
    """Whether ``/proc/mounts`` lists a FUSE mount at ``mountpoint`` and it answers ``statvfs``."""
    try:
        return mount_state(mountpoint) == "live"
    except OSError:
        return False


def wait_until_mounted(
    mountpoint: str, timeout_s: float = 10.0, poll_s: float = 0.02, *, from_child: bool = False
) -> bool:
    """Poll (every ``poll_s`` seconds) until ``mountpoint`` is a live FUSE mount; False after ``timeout_s``.

    ``from_child`` (the mount server waiting on its own mount; ``mountpoint`` a real path): the
    ``statvfs(2)`` is asked by a child process (``stat -f``), never by this one. Once a server has read a
    request, the kernel waits for its answer even through SIGKILL (``request_wait_answer`` in
    fs/fuse/dev.c): a server killed while its own thread waited on its mount could never exit, its
    ``/dev/fuse`` descriptor would stay open, the connection would never be aborted, and every process
    touching the mount would hang with it."""
    deadline = time.monotonic() + timeout_s
    while True:
        if _answers_from_child(mountpoint, deadline) if from_child else is_live(mountpoint):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def _answers_from_child(mountpoint: str, deadline: float) -> bool:
    """Whether ``/proc/mounts`` lists a FUSE mount at real path ``mountpoint`` and ``stat -f`` run in a
    child process gets an answer from it before ``deadline`` (``time.monotonic()`` seconds)."""
    import subprocess

    m = proc_mount(mountpoint, resolve=False)
    if m is None or not m[1].startswith("fuse"):
        return False
    try:
        r = subprocess.run(
            ["stat", "-f", "--", mountpoint],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=max(deadline - time.monotonic(), 1.0),
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def mount_record_key(libdir: str, backend) -> bytes:
    """The config key of the status record of ``libdir``'s read-write mount: :data:`~schema.CFG_MOUNT_STATUS`
    on a store one host serves (LMDB); on a shared store (etcd: a backend with leases, several read-write
    mounts across hosts) one key per mount, :data:`~schema.CFG_MOUNTS` + ``host:libdir``."""
    if not hasattr(backend, "acquire_lease"):
        return S.CFG_MOUNT_STATUS
    import socket

    return S.CFG_MOUNTS + f"{socket.gethostname()}:{os.path.abspath(libdir)}".encode()


def mount_info(libdir: str, store: Store | None = None) -> dict | None:
    """``{"pid", "mountpoint", "started", "uptime_s", ...}`` of the live mount server of ``libdir``, or None
    (``started``: its start, seconds since the epoch; ``uptime_s``: seconds since then, reckoned now — the
    record in the store is written when the mount starts).

    Live means: a process holds ``mount.lock``, ``/proc/mounts`` lists a libraryfs mount at the mountpoint
    it recorded in the store, and that mount answers ``statvfs`` (a mount detached lazily while files
    stay open does not count). ``store``: the library's store when this process has it open already
    (py-lmdb refuses to open one environment twice in a process); else it is opened read-only.
    """
    libdir = os.path.abspath(libdir)
    try:
        if lock_holder(libdir, MOUNT_LOCK) is None:
            return None
    except OSError:
        return None
    try:
        st = store or Store(libdir, readonly=True)
    except LibraryError:
        return None
    try:
        with st.read() as t:
            info = t.cfg_json(mount_record_key(libdir, st.backend))
    finally:
        if store is None:
            st.close()
    if not isinstance(info, dict):
        return None
    if not info.get("mountpoint"):  # a --read-only mount records nothing in the store: run.json says
        run = read_run(libdir)
        info = {**run, "pid": run.get("server_pid"), "read_only": True} if run else {}
    mp = info.get("mountpoint")
    if not mp or not is_live(mp) or not is_libraryfs_mount(mp):
        return None
    if isinstance(info.get("started"), int | float):  # the record holds the uptime_s of when it was written
        info["uptime_s"] = round(max(0.0, time.time() - info["started"]), 1)
    return info


# -- processes ---------------------------------------------------------------------------------------------
def reset_signal_mask() -> None:
    """Unblock every signal in the calling thread (call it first thing in a daemon's main thread).

    A process inherits the signal mask of the thread that forked it, across ``exec``. The mount server
    blocks SIGTERM, SIGINT and SIGHUP in all its threads (its ``sigwait`` thread takes them); an indexer it
    starts from one of them (:mod:`libraryfs.daemon.indexwatch`) began life with those blocked and ignored
    ``umount``'s SIGTERM. daemon(7): a daemon resets the signal mask it inherited."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def child_exit(pid: int, not_child: str | None = "exited") -> str | None:
    """How child process ``pid`` ended (``"exit status N"``, ``"killed by SIGKILL"``), or None while it runs.
    Reaps it (``waitpid(WNOHANG)``). A pid that is not a child of this process (or was reaped already:
    subprocess reaps the Popen objects it dropped) gives ``not_child``."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not_child
    if got == 0:
        return None
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie child of ours counts as dead).

    A process whose main thread is already a zombie while other threads are still exiting (after
    ``SIGKILL`` the threads of a group exit one by one) counts as alive: its threads share its open files,
    so its ``/dev/fuse`` descriptor — whose last close aborts the FUSE connection — is still open until the
    last thread is gone (``/proc/<pid>/stat`` shows the main thread's state only; proc(5), exit in
    kernel/exit.c closes the files before the thread turns zombie).
    """
    if not pid or pid < 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = process_state(pid)
    if state != "Z":
        return state is not None
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    return any(process_state(t) not in (None, "Z", "X") for t in tids if t != pid)


def stopped_server(libdir: str) -> tuple[int, str] | None:
    """``(pid, "stopped (SIGSTOP)")`` when the mount server of ``libdir`` — the holder of ``mount.lock``,
    which names its pid — is stopped (SIGSTOP, a debugger: :func:`~libraryfs.probes.stopped_how`), else
    None. Reads only the lock file and ``/proc``: every request to the mount of a stopped server (even
    ``statvfs``) waits until it runs again, so callers ask this before touching the mount."""
    try:
        pid = lock_holder(libdir, MOUNT_LOCK)
    except OSError:
        return None
    how = stopped_how(pid)
    return (pid, how) if pid and how else None


def refuse_if_stopped(libdir: str, command: str) -> None:
    """Raise :class:`~libraryfs.errors.ServerStopped` (exit status 9) when the mount server of ``libdir`` is
    stopped (:func:`libraryfs.layout.stopped_server`): every request to its mount, even ``statvfs``, would
    wait until it runs again. Reads only the lock file and ``/proc``; touches no mount."""
    found = stopped_server(libdir)
    if not found:
        return
    pid, how = found
    go_on = f"continue it with `kill -CONT {pid}`" if "SIGSTOP" in how else "let its debugger continue it"
    mp = mountpoint_of(libdir)
    if mp is None:  # detached already (`umount --lazy`): it still holds the library's lock
        raise ServerStopped(
            f"mount server PID {pid} of {libdir} is {how} and still holds the library (its mount is "
            f"detached); {go_on}: it then exits"
        )
    raise ServerStopped(
        f"mount server PID {pid} of {libdir} is {how}: its mount {mp} answers nothing until it runs again, "
        f"so `libraryfs {command}` did not touch it; {go_on}, or detach the mount with "
        f"`libraryfs umount --lazy {mp}`"
    )


def wait_exit(pid: int | None, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Poll until process ``pid`` is gone (:func:`pid_alive`); True if it exited within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def read_run(libdir: str) -> dict:
    """``run.json`` of ``libdir``: ``{"libdir", "mountpoint", "server_pid", "indexer_pid", "started"}``
    recorded by ``libraryfs mount`` (``{}`` when absent or unreadable)."""
    try:
        with open(os.path.join(state_dir(libdir), RUN_FILE)) as f:
            out = json.load(f)
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def write_run(libdir: str, info: dict) -> None:
    """Replace ``run.json`` atomically (write to a temporary file, then rename). Raises ``OSError`` naming
    the temporary file (ENOSPC on a full disk), which is removed again: none is left behind."""
    path = os.path.join(state_dir(libdir), RUN_FILE)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.replace(tmp, path)
    except OSError as e:  # a full disk fails the write at close, naming no file
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(e.errno, e.strerror, e.filename or tmp) from None


def remove_run(libdir: str) -> None:
    """Delete ``run.json`` (missing is fine)."""
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(state_dir(libdir), RUN_FILE))


# -- the indexer's progress --------------------------------------------------------------------------------
def index_backlog(t) -> dict:
    """What the indexer still has to do, read in the transaction ``t``: ``{"pending_records", "state",
    "inbox_entries"}`` — journal records after its cursor, its last published state (``"idle"``,
    ``"indexing"``, ``"stopped"``; None before it ever ran) and whether ``/inbox`` holds entries."""
    inbox = t.lookup(S.ROOT_INO, b"inbox")
    return {
        "pending_records": max(0, t.journal_tail() - t.cfg_int(S.CFG_CURSOR)),
        "state": t.cfg_json(S.CFG_INDEXER_STATUS).get("state"),
        "inbox_entries": inbox is not None and not t.dir_is_empty(inbox),
    }


def wait_until_idle(
    libdir: str, timeout_s: float = 60.0, *, inbox: bool = False, poll_s: float = 0.05
) -> float:
    """Wait until the indexer of ``libdir`` has consumed every journal record and says it is idle (and,
    with ``inbox=True``, has filed every ``/inbox`` entry); returns the seconds waited.

    Polls one read transaction every ``poll_s`` seconds. Raises ``TimeoutError`` after ``timeout_s`` seconds
    naming what is still pending (records, state, inbox); :class:`~libraryfs.errors.LibraryError` when
    ``libdir`` holds no readable library. Nothing here starts an indexer: without one the wait times out.
    """
    t0 = time.monotonic()
    st = Store(libdir, readonly=True)
    try:
        while True:
            with st.read() as t:
                b = index_backlog(t)
            if b["pending_records"] == 0 and b["state"] == "idle" and not (inbox and b["inbox_entries"]):
                return time.monotonic() - t0
            if time.monotonic() - t0 >= timeout_s:
                raise TimeoutError(
                    f"the indexer of {libdir} did not become idle within {timeout_s:g} s "
                    f"({count(b['pending_records'], 'record')} pending, state {b['state']}"
                    f"{', inbox not empty' if inbox and b['inbox_entries'] else ''})"
                )
            time.sleep(poll_s)
    finally:
        st.close()
