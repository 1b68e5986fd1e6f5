"""Run a read of the store in a child process, so that a crash of the storage engine is a report, not a
crash of the caller.

LMDB trusts its file: a damaged page can end the reading process with SIGABRT (``mdb_cassert``), SIGSEGV or
SIGBUS, which Python cannot catch. The CLI's reads (``status``, ``find``, ``check``, ``recall``, ``answer``)
therefore run in a forked child (:func:`run_isolated`); the child sends its result back through a pipe, and
a child killed by a signal becomes :class:`~libraryfs.errors.Damaged` in the parent. A fork costs a few ms
here. What it isolates is crashes only: a damaged page LMDB reads without crashing can still give the
child a wrong answer (missing records), which it returns as any other; it sets no time limit. That is why
the commands also check the pages first (``cli/common.py verify_pages``; docs/reliability.md).

Call it before the calling process opens the store: py-lmdb refuses an environment inherited over fork
(ARCHITECTURE §7), so the child opens its own. Only for single-threaded callers (the CLI).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
from collections.abc import Callable
from typing import TypeVar

from libraryfs.errors import Damaged, LibraryError

T = TypeVar("T")


def _child(fn: Callable[[], T], wfd: int) -> None:
    """Body of the child: run ``fn``, pickle ``("ok", result)`` or ``("err", exception)`` into ``wfd``."""
    faulthandler.disable()  # a crash is reported by the parent in one line, not as a C-level traceback
    try:
        out: tuple[str, object]
        try:
            out = ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            out = ("err", e)
        try:
            data = pickle.dumps(out)
        except Exception:  # an unpicklable result or exception: its message still goes back
            err = out[1] if out[0] == "err" else TypeError("unpicklable result")
            data = pickle.dumps(("msg", (isinstance(err, LibraryError), type(err).__name__, str(err))))
        with os.fdopen(wfd, "wb") as w:
            w.write(data)
    finally:
        os._exit(0)


def run_isolated(fn: Callable[[], T], what: str = "reading the library's store") -> T:
    """``fn()`` run in a forked child; returns its result or re-raises its exception in this process.

    Raises :class:`~libraryfs.errors.Damaged` (``<what> crashed (SIGABRT): the store is damaged; run
    `libraryfs check```) when the child dies of a signal or exits without an answer. ``fn``'s result and
    exceptions must pickle (an exception that does not comes back as a ``LibraryError`` with its message).
    """
    return start_isolated(fn, what)()


def start_isolated(fn: Callable[[], T], what: str = "reading the library's store") -> Callable[[], T]:
    """Fork the child of :func:`run_isolated` now and return its ``wait()``: this process works on while the
    child reads (on a second CPU), then ``wait()`` returns the child's result or raises as
    :func:`run_isolated` does. Call ``wait()`` exactly once, before forking another child or opening the
    store in this process."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its coverage is the parent's result)
        os.close(rfd)
        _child(fn, wfd)
    os.close(wfd)

    def wait() -> T:
        """The child's result (its exception re-raised; :class:`~libraryfs.errors.Damaged` for a crash)."""
        with os.fdopen(rfd, "rb") as r:
            data = r.read()
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            sig = signal.Signals(os.WTERMSIG(status)).name
            raise Damaged(f"{what} crashed ({sig}): the library's store is damaged; run `libraryfs check`")
        if not data:
            raise Damaged(f"{what} ended without an answer (exit status {os.waitstatus_to_exitcode(status)})")
        kind, value = pickle.loads(data)
        if kind == "ok":
            return value
        if kind == "err":
            raise value
        is_domain, name, message = value
        raise (LibraryError if is_domain else RuntimeError)(f"{name}: {message}")

    return wait
