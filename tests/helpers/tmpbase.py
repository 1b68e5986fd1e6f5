"""The per-session temporary base directories (``/tmp/libraryfs-pytest-*``, tests/conftest.py): bounded.

A session that passes removes its base; one that fails keeps it for the post-mortem. So kept bases do not
pile up forever, each session starting prunes the kept bases of earlier sessions (:func:`prune_kept_bases`):
those older than a day, and those past the newest :data:`KEEP` that are older than :data:`IDLE_S` (a base
that young may belong to a session still running beside this one). A base with a mount at or under it is
never touched: a live mount is someone's running test, and a dead FUSE mount fails every rmtree with EIO
or ENOTCONN (`fusermount3 -u` it first).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

PREFIX = "libraryfs-pytest-"  #: name prefix of a session's base directory
KEEP = 10  #: kept bases that survive however old they are, up to a day
IDLE_S = 2 * 3600  #: a base younger than this may be a running session's: never pruned by count
MAX_AGE_S = 24 * 3600  #: a base older than this is pruned even within the newest KEEP


def mount_points() -> list[str]:
    """Every mount point of this mount namespace (``/proc/self/mountinfo`` field 5, octal escapes decoded)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for ln in lines:
        fields = ln.split(" ")
        if len(fields) > 4:
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out


def prune_kept_bases(tmpdir: str, own: str | None = None, now: float | None = None) -> list[str]:
    """Remove the kept session bases under ``tmpdir`` that the rules of the module docstring allow, never
    ``own`` (this session's) nor one holding a mount. Returns the paths removed (errors are ignored: a base
    another user's session owns, or one removed meanwhile, is left alone)."""
    now = time.time() if now is None else now
    mounts = mount_points()
    bases = []
    for p in Path(tmpdir).glob(PREFIX + "*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        if p.is_dir() and not p.is_symlink() and st.st_uid == os.getuid() and str(p) != own:
            bases.append((st.st_mtime, p))
    bases.sort(reverse=True)  # newest first
    removed = []
    for rank, (mtime, p) in enumerate(bases):
        age_s = now - mtime
        if not (age_s > MAX_AGE_S or (rank >= KEEP and age_s > IDLE_S)):
            continue
        root = str(p)
        if any(m == root or m.startswith(root + "/") for m in mounts):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(root)
    return removed
