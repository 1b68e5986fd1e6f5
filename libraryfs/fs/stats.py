"""Read accounting per calling process: the Library Theorem's cost made visible (``.libraryfs/stats.json``).

A *TOC page read* is the first read of an ``INDEX.md`` or ``.index/NNNN.md`` handle; an *entry read* is the
first read of an ordinary file handle. Tokens: exact o200k_base counts for TOC pages; for entries, the
indexer's token count of the file scaled by the fraction of bytes served (``bytes/4`` before the indexer has
counted it).

:class:`ReadAccounting` is what the view charges on every read: it meters the mount's read budget
(:class:`~libraryfs.fs.budget.ReadBudget`, EDQUOT past it) and then counts the read in :class:`ReadStats`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Protocol

from libraryfs.fs.store import Txn


@dataclass
class Counters:
    """What one process read through the mount (bytes, tokens and counts)."""

    comm: str = ""
    toc_pages_read: int = 0
    entries_read: int = 0
    bytes_read: int = 0
    tokens_read: int = 0
    toc_tokens_read: int = 0
    entry_tokens_read: int = 0
    first_ns: int = 0
    last_ns: int = 0


class ReadStats:
    """Counters keyed by pid, plus totals. Cheap: a dict update per read."""

    def __init__(self, max_pids: int = 4096) -> None:
        self.by_pid: dict[int, Counters] = {}
        self.total = Counters(comm="*")
        self.max_pids = max_pids

    def _get(self, pid: int) -> Counters:
        c = self.by_pid.get(pid)
        if c is None:
            if len(self.by_pid) >= self.max_pids:
                oldest = min(self.by_pid, key=lambda p: self.by_pid[p].last_ns)
                del self.by_pid[oldest]
            c = self.by_pid[pid] = Counters(comm=_comm(pid), first_ns=time.time_ns())
        c.last_ns = time.time_ns()
        return c

    def toc_page(self, pid: int, nbytes: int, tokens: int) -> None:
        """Count the first read of a TOC page handle."""
        for c in (self._get(pid), self.total):
            c.toc_pages_read += 1
            c.bytes_read += nbytes
            c.tokens_read += tokens
            c.toc_tokens_read += tokens

    def entry(self, pid: int, nbytes: int, tokens: int, first: bool) -> None:
        """Count a read of an entry (``first`` for the first read of its handle)."""
        for c in (self._get(pid), self.total):
            c.entries_read += int(first)
            c.bytes_read += nbytes
            c.tokens_read += tokens
            c.entry_tokens_read += tokens

    def bytes_only(self, pid: int, nbytes: int) -> None:
        """Count bytes of control-plane reads (no page or entry)."""
        for c in (self._get(pid), self.total):
            c.bytes_read += nbytes

    def to_json(self) -> dict:
        """``{"total": {...}, "by_pid": {"<pid>": {...}}}``."""
        return {"total": asdict(self.total), "by_pid": {str(p): asdict(c) for p, c in self.by_pid.items()}}


class Budget(Protocol):
    """What the view needs of a read budget (:class:`libraryfs.fs.budget.ReadBudget`)."""

    def charge(self, reads: int = 0, tokens: int = 0) -> None:
        """Consume both or neither; raises :class:`~libraryfs.errors.QuotaExceeded` past a limit."""
        ...

    def to_json(self) -> str:
        """The JSON document ``/.libraryfs/budget`` shows."""
        ...


class ReadAccounting:
    """Charges reads to the mount's read budget (if any), then counts them per pid (``stats.json``).

    A charge the budget refuses raises :class:`~libraryfs.errors.QuotaExceeded` (EDQUOT) and nothing is
    counted. Token units: o200k_base tokens (PAPERS.md §1: the Library Theorem's cost).
    """

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget
        self.stats = ReadStats()

    def charge_toc(self, pid: int, nbytes: int, toc_tokens: int) -> None:
        """Count the first read of a TOC page handle: one read and ``toc_tokens``. Raises QuotaExceeded."""
        if self.budget is not None:
            self.budget.charge(reads=1, tokens=toc_tokens)
        self.stats.toc_page(pid, nbytes, toc_tokens)

    def charge_entry(self, t: Txn, ino: int, size: int, nbytes: int, pid: int, first: bool) -> None:
        """Count ``nbytes`` read from entry ``ino`` of ``size`` bytes (``first``: the handle's first read
        costs one read). Raises QuotaExceeded when the budget is spent (nothing is counted then)."""
        tokens = entry_tokens(t, ino, size, nbytes)
        if self.budget is not None:
            self.budget.charge(reads=1 if first else 0, tokens=tokens)
        self.stats.entry(pid, nbytes, tokens, first)

    def count_bytes(self, pid: int, nbytes: int) -> None:
        """Count bytes read from a control file (no tokens, no budget)."""
        self.stats.bytes_only(pid, nbytes)


def entry_tokens(t: Txn, ino: int, size: int, nbytes: int) -> int:
    """Tokens of ``nbytes`` read from entry ``ino`` of ``size`` bytes: its share of the indexer's count
    (meta ``tokens``, when counted at this size), else ``ceil(nbytes / 4)``; at least 1 when counted."""
    m = t.entry_meta(ino)
    if m is None or m.tokens is None or m.size != size or not size:
        return (nbytes + 3) // 4
    return max(1, round(m.tokens * nbytes / size))


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""
