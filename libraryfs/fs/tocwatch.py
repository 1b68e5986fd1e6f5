"""Which TOC pages the indexer rewrote since the last look: one read of the TOC generation per poll.

Shared by the mount (it drops the kernel's caches of those pages, :mod:`libraryfs.fs.mount`) and the MCP
server (it tells subscribed clients, :mod:`libraryfs.daemon.mcpd`); imports nothing that needs libfuse.
"""

from __future__ import annotations

from libraryfs.fs import schema as S
from libraryfs.fs.generated import index_alias_path, toc_page_paths
from libraryfs.fs.store import Store, Txn

LOG_COMMITS = 64  #: commits kept in ``CFG_TOC_DIRTY_LOG`` (a watcher further behind re-reads every TOC)
LOG_INOS = (
    5000  #: directories listed in the whole log (a commit that rendered more is logged as "unknown": all)
)


def record_rendered(t: Txn, gen: int, rendered: list[int]) -> None:
    """In the indexer's commit ``t`` of TOC generation ``gen``: the directories whose pages it rewrote, both as
    the last commit's list (``CFG_TOC_DIRTY``) and appended to the log of the last :data:`LOG_COMMITS` commits
    (``CFG_TOC_DIRTY_LOG``), so a watcher that polls after several commits still names every page."""
    t.put_cfg(S.CFG_TOC_DIRTY, S.dumps(rendered[:LOG_INOS]))
    log = S.loads(t.cfg(S.CFG_TOC_DIRTY_LOG), [])
    if not isinstance(log, list):
        log = []
    log.append([gen, rendered if len(rendered) <= LOG_INOS else None])
    log = log[-LOG_COMMITS:]
    while len(log) > 1 and sum(len(e[1] or ()) for e in log) > LOG_INOS:  # the value stays small (≤ ~40 KB)
        log.pop(0)
    t.put_cfg(S.CFG_TOC_DIRTY_LOG, S.dumps(log))


class TocWatcher:
    """Finds the TOC files to invalidate after the indexer commits (one :meth:`poll` per tick).

    The indexer bumps ``CFG_TOC_GEN`` and lists the directories it re-rendered in ``CFG_TOC_DIRTY`` and in the
    log of its last commits (:func:`record_rendered`). The first poll only records the generation (nothing
    cached can be stale before the mount served it).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last_gen = -1

    def poll(self) -> list[bytes]:
        """Absolute paths of the TOC pages rewritten since the last poll (``INDEX.md`` and ``.index/NNNN.md``
        of each re-rendered directory that still exists); ``[]`` when the generation did not move. After
        several commits, the union of their directories (from the commit log); every directory with TOC
        pages when the log does not reach back that far."""
        with self.store.read() as t:
            gen = t.cfg_int(S.CFG_TOC_GEN)
            if gen == self.last_gen:
                return []
            paths: list[bytes] = []
            if self.last_gen >= 0:
                for ino in sorted(self._dirty_since(t, gen)):
                    p = t.path_of(ino)
                    if p is not None:
                        paths.extend(toc_page_paths(p, t.toc_page_count(ino)))
                        paths.append(index_alias_path(p))  # page 0 when the user owns INDEX.md
        self.last_gen = gen
        return paths

    def _dirty_since(self, t: Txn, gen: int) -> set[int]:
        """Directories re-rendered by the commits after :attr:`last_gen` up to ``gen``."""
        if gen == self.last_gen + 1:
            last: list[int] = S.loads(t.cfg(S.CFG_TOC_DIRTY), []) or []  # type: ignore[assignment]  # JSON list
            return set(last)
        log = S.loads(t.cfg(S.CFG_TOC_DIRTY_LOG), [])
        by_gen = (
            {e[0]: e[1] for e in log if isinstance(e, list) and len(e) == 2} if isinstance(log, list) else {}
        )
        wanted = range(self.last_gen + 1, gen + 1)
        if all(by_gen.get(g) is not None for g in wanted):
            return {ino for g in wanted for ino in by_gen[g]}
        return {S.from_u64(k) for k, _ in t.kv.range(S.DB_TOC, b"", None, keys_only=True)}  # every TOC
