"""The TOC pages a mount serves: ``INDEX.md`` and ``.index/NNNN.md`` of every real directory.

The indexer renders and stores each directory's pages (:mod:`libraryfs.index.toc`); :class:`TocPages` serves
them as stored, or a *pending* placeholder for page 0 until the indexer has run. When the indexer is not
running (nobody holds the library's ``indexer.lock``: :func:`libraryfs.layout.indexer_running`) and journal records are pending, every page served gets
one ``> **Stale index**`` line after its header comment, so an agent reading it knows the TOC lags the
directory. ``getattr`` and ``open`` both go through :meth:`TocPages.served`, so ``st_size`` equals the bytes
read (C14). Nothing here writes the store.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable

from libraryfs.errors import NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.meta import SectionMeta
from libraryfs.fs.store import Store, Txn
from libraryfs.layout import indexer_running
from libraryfs.words import count

INDEXER_CHECK_S = 1.0  #: how long (seconds) one answer to "is the indexer running?" is reused
PENDING_NAMES_MAX = 40  #: names listed by the pending placeholder of ``INDEX.md``


def estimate_tokens(data: bytes) -> int:
    """Token estimate of ``data`` when no exact count is at hand: ``ceil(bytes / 4)``."""
    return (len(data) + 3) // 4


class TocPages:
    """Serves the stored TOC pages of real directories (module doc).

    ``started_ns``: when the mount started (ns; the oldest time a page shows). ``count_tokens(bytes) -> int``
    counts a page the indexer has not counted (default :func:`estimate_tokens`): the indexer stores each
    page's o200k_base count, so the mount never loads the tokenizer (~2 s) on a read path.
    """

    def __init__(
        self, store: Store, started_ns: int, count_tokens: Callable[[bytes], int] | None = None
    ) -> None:
        self.store = store
        self.started_ns = started_ns
        self._count_tokens = count_tokens or estimate_tokens
        self._tokens_cache: dict[tuple[int, int, bytes], int] = {}
        self._indexer_seen: tuple[float, bool] = (float("-inf"), True)  # (monotonic s, running)
        self._writable_seen: tuple[float, bool] = (float("-inf"), True)  # (monotonic s, store writable)

    def time_ns(self, t: Txn) -> int:
        """The time TOC pages show (ns): the later of the mount's start and the last TOC generation."""
        return max(self.started_ns, t.cfg_int(S.CFG_TOC_GEN))

    def stored(self, t: Txn, dir_ino: int, page: int) -> bytes:
        """TOC page ``page`` of directory ``dir_ino`` as stored by the indexer, or the pending placeholder
        for page 0. Raises NotFound for a missing page > 0."""
        raw = t.toc_page(dir_ino, page)
        if raw is not None:
            return raw
        if page:
            raise NotFound("no such TOC page")
        return self._pending(t, dir_ino)

    def served(self, t: Txn, dir_ino: int, page: int) -> tuple[bytes, bytes, bytes]:
        """``(served bytes, stored page bytes, marker line inserted or b"")`` of one TOC page. The marker
        goes after the first line when that is the header comment (``<!--``); pages without one are served
        as stored."""
        raw = self.stored(t, dir_ino, page)
        marker = self._stale_line(t) if raw.startswith(b"<!--") else b""
        if not marker:
            return raw, raw, b""
        nl = raw.find(b"\n")
        head, tail = (raw + b"\n", b"") if nl < 0 else (raw[: nl + 1], raw[nl + 1 :])
        return head + marker + tail, raw, marker

    def tokens(self, t: Txn, dir_ino: int, page: int, raw: bytes, marker: bytes) -> int:
        """Tokens of a served page: the indexer's stored count of ``raw`` (else counted here, cached) plus
        the marker line's."""
        m = t.section_meta(dir_ino)
        counts = m.toc_page_tokens if m is not None else []
        if page < len(counts) and counts[page] and t.toc_page(dir_ino, page) == raw:
            n = counts[page]
        else:
            key = (dir_ino, page, raw[:200])
            cached = self._tokens_cache.get(key)
            if cached is not None:
                n = cached
            else:
                n = self._count_tokens(raw)
                if len(self._tokens_cache) > 10_000:
                    self._tokens_cache.clear()
                self._tokens_cache[key] = n
        return n + (self._count_tokens(marker) if marker else 0)

    def facts(self, t: Txn, dir_ino: int) -> dict:
        """Freshness of a directory's TOC (the ``user.libraryfs.*`` xattrs): ``generation``, ``built_from``
        (journal sequence), ``pages``, ``stale`` (1 before the indexer has built it)."""
        m = t.section_meta(dir_ino) or SectionMeta()
        return {
            "generation": m.toc_generation,
            "built_from": m.toc_journal_seq or 0,
            "pages": t.toc_page_count(dir_ino),
            "stale": int(m.toc_journal_seq is None),
        }

    def _stale_line(self, t: Txn) -> bytes:
        """The ``> **Stale index**`` line (with its newline) when the indexer is not running and journal
        records are pending, else ``b""``. The lock test is reused for :data:`INDEXER_CHECK_S` seconds."""
        pending = t.journal_tail() - t.cfg_int(S.CFG_CURSOR)
        if pending <= 0 or self._indexer_is_running():
            return b""
        libdir = os.fsdecode(self.store.libdir)
        if self._store_writable(libdir):
            hint = f"run `libraryfs index {shlex.quote(libdir)}`"
        else:  # `libraryfs index` would fail with EROFS/EACCES opening the store: never suggest it
            hint = "the library cannot be written here: index it where it can be, then mount it again"
        return (
            f"> **Stale index**: the indexer is not running; {count(pending, 'change')} "
            f"{'is' if pending == 1 else 'are'} not reflected here ({hint}).\n"
        ).encode("utf-8", "surrogateescape")

    def _store_writable(self, libdir: str) -> bool:
        """Whether ``libraryfs index`` could write the library's store: its ``store/`` directory (else the
        library directory) is writable by this user (``access(2)`` ``W_OK``: false on a read-only filesystem, EROFS, or without
        permission). Before, a read-only library's banner said "run `libraryfs index LIB`", which then
        failed (trial 1203b). Rechecked with the indexer test, every :data:`INDEXER_CHECK_S` seconds."""
        checked_s, writable = self._writable_seen
        now_s = time.monotonic()
        if now_s - checked_s >= INDEXER_CHECK_S:
            store_dir = os.path.join(libdir, "store")  # an etcd library has none: its directory then
            writable = os.access(store_dir if os.path.isdir(store_dir) else libdir, os.W_OK)
            self._writable_seen = (now_s, writable)
        return writable

    def _indexer_is_running(self) -> bool:
        checked_s, running = self._indexer_seen
        now_s = time.monotonic()
        if now_s - checked_s >= INDEXER_CHECK_S:
            running = indexer_running(os.fsdecode(self.store.libdir))
            self._indexer_seen = (now_s, running)
        return running

    def _pending(self, t: Txn, dir_ino: int) -> bytes:
        """What INDEX.md shows before the indexer has built it: the first names, marked pending."""
        path = t.path_of(dir_ino) or b"/"
        lines = [
            f"<!-- libraryfs toc: dir={os.fsdecode(path)} page=0 dir_generation=0 stale=yes -->",
            f"# Index of {os.fsdecode(path)}",
            "",
            "_Index pending: the indexer has not summarised this directory yet._",
            "",
        ]
        for k, (name, _child) in enumerate(t.iter_dir(dir_ino)):
            if k >= PENDING_NAMES_MAX:
                lines.append("- …")
                break
            lines.append(f"- {os.fsdecode(name)!s}".replace("\n", "\\n"))
        return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
