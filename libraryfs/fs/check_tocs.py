"""Invariant I10 of :mod:`libraryfs.fs.check`: every directory the indexer has passed over has its TOC.

Once the indexer has committed a pass (``config[toc_generation]`` exists), a reachable directory that holds
entries and is not excluded from TOCs (:mod:`libraryfs.fs.exclude`) has page 0 of its TOC — unless the
indexer still owes it one: a journal record after the cursor names it (its next pass renders it), or it is
listed in ``config[toc_pending]`` (deferred until it settles, committed with the cursor). A directory with
none of these was dropped by the indexer (before that list existed, a killed indexer lost the directories
it had deferred: their records were consumed, their TOC never rendered, and ``INDEX.md`` stayed "Index
pending" for good). Repair queues it in ``config[toc_pending]``; the next pass renders it.
"""

from __future__ import annotations

from collections.abc import Iterable

from libraryfs.fs import schema as S
from libraryfs.fs.exclude import TocExclusion
from libraryfs.fs.store import Txn


def named_by_pending_records(t: Txn) -> set[int]:
    """Directories named by a journal record after the indexer's cursor (parents, old parents, and the
    directory itself of a ``mkdir`` or ``rename``): the next pass renders them."""
    named: set[int] = set()
    for _seq, r in t.journal_since(t.cfg_int(S.CFG_CURSOR), 1 << 40):
        named.update(i for i in (r.parent, r.old_parent) if i)
        if r.op in (S.OP_MKDIR, S.OP_RENAME):
            named.add(r.ino)
    return named


def missing_tocs(t: Txn, dirs: Iterable[int]) -> list[int]:
    """Those of the reachable directories ``dirs`` that break I10 (module doc): entries, no TOC page 0, not
    excluded, and owed by nobody. Empty before the indexer's first commit."""
    if t.cfg(S.CFG_TOC_GEN) is None:
        return []
    owed = t.toc_pending()
    named: set[int] | None = None  # read only when a directory lacks its TOC (the usual case: none does)
    exclusion = TocExclusion()
    out: list[int] = []
    for d in dirs:
        if d in owed or t.toc_page(d, 0) is not None or t.dir_is_empty(d):
            continue
        if named is None:
            named = named_by_pending_records(t)
        if d in named or exclusion.excluded(t, d):
            continue
        out.append(d)
    return out
