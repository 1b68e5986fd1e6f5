"""Facts about a library's processes, paths and logs, read without ever waiting on a mount.

A FUSE request waits for its server's answer: every ``stat``/``statvfs`` of a mount whose server is stopped
(SIGSTOP, a debugger) blocks until the server runs again (``request_wait_answer`` in fs/fuse/dev.c). What
the CLI must learn before it touches a mount is therefore read from ``/proc`` and from the directories
around the mount, never from the mount itself:

* :func:`process_state`: a process's run state letter from ``/proc/<pid>/stat`` (proc(5));
* :func:`stopped_how`: whether that state is a stop (``T`` by a signal, ``t`` by a tracer);
* :func:`real_path_untouched`: a path's real name, resolving its parents but never ``lstat``-ing the
  path itself (which, at a mountpoint, asks the mount's server for its root's attributes);
* :func:`last_log_line`: the last line of a log worth showing, read from its tail only.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: Run states of proc(5) that are stops, and how to say so in one line.
STOPPED_STATES = {"T": "stopped (SIGSTOP)", "t": "stopped by a debugger (tracing stop)"}
LOG_TAIL_BYTES = 64 << 10  #: how much of a log's end :func:`last_log_line` reads
_MAX_LINKS = 40  #: symlinks followed by :func:`real_path_untouched` (Linux's MAXSYMLINKS)


def process_state(pid: int | None) -> str | None:
    """The run state letter of process ``pid`` (``R``, ``S``, ``D``, ``T``, ``t``, ``Z``…; the third field
    of ``/proc/<pid>/stat``, read after the last ``)`` since the command name may hold spaces and
    parentheses, proc(5)), or None when there is no such process or it cannot be read."""
    if not pid or pid < 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0].decode()
    except (OSError, IndexError):
        return None


def stopped_how(pid: int | None) -> str | None:
    """``"stopped (SIGSTOP)"`` / ``"stopped by a debugger (tracing stop)"`` when process ``pid`` is stopped,
    else None (running, sleeping, gone). Reads only ``/proc/<pid>/stat``."""
    return STOPPED_STATES.get(process_state(pid) or "")


def real_path_untouched(path: str, listed: set[str]) -> str:
    """The real path of ``path`` (symlinks resolved, absolute) found without ``lstat``-ing ``path`` itself
    when it is one of the mountpoints ``listed`` (``/proc/mounts``' real paths): the parent is resolved with
    ``os.path.realpath``, the last component only with ``readlink(2)`` (which answers EINVAL for a directory
    without asking a FUSE server). ``os.path.realpath`` ``lstat``s every component, and the ``lstat`` of a
    mountpoint is a GETATTR of the mount's root, which blocks while its server is stopped."""
    path = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        parent, name = os.path.split(path)
        cand = os.path.join(os.path.realpath(parent), name) if name else parent
        if cand in listed or not name:
            return cand
        try:
            target = os.readlink(cand)
        except OSError:  # not a symlink (or absent): its real path is the resolved parent's child
            return cand
        path = os.path.normpath(os.path.join(os.path.dirname(cand), target))
    return os.path.realpath(path)  # a symlink loop: realpath says so the usual way


def last_log_line(
    path: str,
    *,
    start: int = 0,
    prefer: Callable[[str], bool] | None = None,
    tail_bytes: int = LOG_TAIL_BYTES,
) -> str | None:
    """The last non-empty line (stripped) of the log at ``path`` written after byte ``start`` — the last one
    ``prefer`` accepts if any does, else the last one; ``""`` when there is none, None when the log cannot
    be read. Only the last ``tail_bytes`` are read (a line cut by that window is dropped); nothing is
    created (``status`` may run on a read-only library)."""
    try:
        with open(path, "rb") as f:
            begin = max(start, os.fstat(f.fileno()).st_size - tail_bytes)
            f.seek(max(begin - 1, start))  # the byte before the window: did it begin a line?
            data = f.read()
    except OSError:
        return None
    if begin > start:
        data = data[1:] if data[:1] == b"\n" else data.partition(b"\n")[2]  # drop a cut line
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    if prefer is not None:
        for ln in reversed(lines):
            if prefer(ln):
                return ln
    return lines[-1] if lines else ""
