"""A library mounted for one piece of work: a private mountpoint, an optional read budget, unmounted after.

:func:`mount_session` is what gives one agent a budget the filesystem enforces: the mount server charges
every read (one read per opened file, tokens per byte read) against ``budget`` and fails a read past it
with EDQUOT (``libraryfs.errors``; ``.libraryfs/budget`` shows what is left). One library is mounted once
at a time (``mount.lock``), so sessions of one library run one after another.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from libraryfs.daemon import launcher
from libraryfs.fs.budget import budget_state

__all__ = ["mount_session", "budget_state"]


@contextlib.contextmanager
def mount_session(libdir: str, budget: str | None = None, timeout_s: float = 20.0) -> Iterator[str]:
    """Mount ``libdir`` on a new private directory (no indexer) with read ``budget`` (``"reads=N,tokens=M"``,
    :func:`libraryfs.fs.budget.parse_budget_spec`; ``None`` = unlimited) and yield the mountpoint;
    unmount when the block ends (lazily if a file is still open). Raises ``launcher.LaunchError`` (or a
    :class:`libraryfs.errors.LibraryError`) when the library cannot be mounted — e.g. it is mounted
    elsewhere."""
    base = tempfile.mkdtemp(prefix="libraryfs-session-")
    mnt = os.path.join(base, "mnt")
    os.mkdir(mnt)
    try:
        launcher.start(libdir, mnt, indexer=False, budget=budget, llm=False, timeout_s=timeout_s)
        try:
            yield mnt
        finally:
            launcher.stop(mnt, lazy=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
