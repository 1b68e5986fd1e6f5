"""Read accounting per calling process: the Library Theorem's cost made visible (``.libraryfs/stats.json``).

A *TOC page read* is the first read of an ``INDEX.md`` or ``.index/NNNN.md`` handle; an *entry read* is the
first read of an ordinary file handle. Tokens: exact o200k_base counts for TOC pages; for entries, the
indexer's token count of the file scaled by the fraction of bytes served (``bytes/4`` before the indexer has
counted it).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


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


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""
