"""Which TOC pages the indexer rewrote since the last look: one read of the TOC generation per poll.

Shared by the mount (it drops the kernel's caches of those pages, :mod:`libraryfs.fs.mount`) and the MCP
server (it tells subscribed clients, :mod:`libraryfs.daemon.mcpd`); imports nothing that needs libfuse.
"""

from __future__ import annotations

from libraryfs.fs import schema as S
from libraryfs.fs.generated import index_alias_path, toc_page_paths
from libraryfs.fs.store import Store


class TocWatcher:
    """Finds the TOC files to invalidate after the indexer commits (one :meth:`poll` per tick).

    The indexer bumps ``CFG_TOC_GEN`` and lists the directories it re-rendered in ``CFG_TOC_DIRTY``. The
    first poll only records the generation (nothing cached can be stale before the mount served it).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last_gen = -1

    def poll(self) -> list[bytes]:
        """Absolute paths of the TOC pages rewritten since the last poll (``INDEX.md`` and ``.index/NNNN.md``
        of each re-rendered directory that still exists); ``[]`` when the generation did not move."""
        with self.store.read() as t:
            gen = t.cfg_int(S.CFG_TOC_GEN)
            if gen == self.last_gen:
                return []
            paths: list[bytes] = []
            if self.last_gen >= 0:
                dirty: list[int] = (
                    S.loads(  # type: ignore[assignment]  # a JSON list of inode numbers
                        t.cfg(S.CFG_TOC_DIRTY), []
                    )
                    or []
                )
                for ino in dirty:
                    p = t.path_of(ino)
                    if p is not None:
                        paths.extend(toc_page_paths(p, t.toc_page_count(ino)))
                        paths.append(index_alias_path(p))  # page 0 when the user owns INDEX.md
        self.last_gen = gen
        return paths
