"""A stand-in for the mount's indexer on a plain directory: bounded INDEX.md TOC pages as real files.

Used only when the benchmark runs on an ordinary directory (``--dir``, development, unit tests); through a
mount the library's own indexer writes INDEX.md and the ``.index/`` pages and this module is not used.
The pages are rendered by the library's own renderer (:func:`libraryfs.index.toc.render`: the format and
page-name scheme of ARCHITECTURE §2, from :mod:`libraryfs.fs.generated`), so an agent walks the same pages
here as through a mount: one line per entry ``- [name](name) — summary (N tok)``; when the lines exceed
one page of ``budget_tokens``, contiguous runs go to leaf pages ``.index/0001.md`` … and INDEX.md becomes
the root of a tree of pages whose lines read ``- [first … last](.index/0001.md) — N entries`` (a B-tree
over names with fan-out set by the budget). What differs from the indexer is the summary: the entry's
first line (≤ 60 characters), with no model and no stored metadata. A file whose whole text may be quoted
(:func:`libraryfs.index.toc.whole_text`) is quoted, as the indexer does.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from libraryfs.fs.generated import PAGES_DIRNAME, is_generated, page_number, page_relpath
from libraryfs.index.lines import QUOTE_MAX_BYTES
from libraryfs.index.toc import Item, render, whole_text
from libraryfs_bench.theorem.accounting import count_tokens as _count_tokens


@dataclass
class TocStats:
    """What :func:`render_dir` wrote: TOC pages, levels below INDEX.md, largest page (tokens)."""

    pages: int
    levels: int
    max_page_tokens: int
    entries: int


@functools.lru_cache(maxsize=200_000)
def count_tokens(text: str) -> int:
    """Cached token count (TOC lines repeat across re-renders)."""
    return _count_tokens(text)


_ENTRIES: dict[tuple[str, int, int], tuple[str, int, str | None]] = {}
_WRITTEN: dict[str, bytes] = {}


def _write_page(path: Path, data: bytes) -> None:
    """Write a TOC page unless this process already wrote the same bytes there (overwriting a file costs
    ~2 ms on ext4; re-renders mostly leave pages unchanged)."""
    key = str(path)
    if _WRITTEN.get(key) == data and path.exists():
        return
    path.write_bytes(data)
    if len(_WRITTEN) > 500_000:
        _WRITTEN.clear()
    _WRITTEN[key] = data


def _item(path: Path, name: str) -> Item:
    """The TOC facts of one directory entry: a section for a directory, else summary and token count
    (cached by path, mtime and size)."""
    try:
        st = path.stat()
    except OSError:
        return Item(os.fsencode(name), "", 0)
    if path.is_dir():
        return Item(os.fsencode(name), "directory", 0, is_dir=True)
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _ENTRIES:
        if len(_ENTRIES) > 2_000_000:
            _ENTRIES.clear()
        _ENTRIES[key] = _read_entry(path)
    summary, tokens, whole = _ENTRIES[key]
    return Item(os.fsencode(name), summary, tokens, whole=whole)


def _read_entry(path: Path) -> tuple[str, int, str | None]:
    """``(first line ≤ 60 characters, o200k_base tokens of the whole file, its whole text when its line may
    quote it)``."""
    try:
        data = path.read_bytes()
    except (IsADirectoryError, PermissionError):
        return "directory", 0, None
    text = data.decode("utf-8", errors="replace")
    line = text.strip().splitlines()[0] if text.strip() else ""
    whole = whole_text(data) if len(data) <= QUOTE_MAX_BYTES and path.is_file() else None
    return line[:60], _count_tokens(text), whole


def render_dir(directory: str | os.PathLike[str], budget_tokens: int = 2000) -> TocStats:
    """(Re)write ``INDEX.md`` (and ``.index/`` pages when needed) for one directory, not recursive.

    Entries are the directory's names in byte order, the generated names (INDEX.md, ``.index``) excluded.
    Every page written is at most ``budget_tokens`` tokens (o200k_base; at least 200). Pages of a previous,
    larger render are removed. Returns :class:`TocStats`. Raises OSError from the filesystem, ValueError
    for a budget under 200 tokens.
    """
    base = Path(directory)
    names = sorted((n for n in os.listdir(base) if not is_generated(n, at_root=False)), key=os.fsencode)
    items = [_item(base / n, n) for n in names]
    out = render(base.name, "", items, max_tokens=budget_tokens, count_tokens=count_tokens)
    idx = base / PAGES_DIRNAME
    if len(out.pages) > 1:
        idx.mkdir(exist_ok=True)
    for k, page in enumerate(out.pages):
        _write_page(base / page_relpath(k), page)
    _remove_stale_pages(idx, len(out.pages))
    return TocStats(len(out.pages), out.levels - 1, max(out.page_tokens), len(names))


def _remove_stale_pages(idx: Path, npages: int) -> None:
    """Remove the pages ``.index/NNNN.md`` with NNNN ≥ ``npages`` (and the directory when it is empty)."""
    if not idx.is_dir():
        return
    for n in os.listdir(idx):
        if page_number(n) >= npages:
            (idx / n).unlink()
            _WRITTEN.pop(str(idx / n), None)
    if npages <= 1 and not os.listdir(idx):
        idx.rmdir()


def render_tree(root: str | os.PathLike[str], budget_tokens: int = 2000) -> int:
    """:func:`render_dir` for ``root`` and every directory below it (``.index`` skipped). Returns the
    number of directories rendered."""
    count = 0
    for dirpath, dirnames, _files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != PAGES_DIRNAME]
        render_dir(dirpath, budget_tokens)
        count += 1
    return count


__all__ = ["TocStats", "count_tokens", "render_dir", "render_tree"]
