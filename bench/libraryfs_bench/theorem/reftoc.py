"""A stand-in for the mount's indexer on a plain directory: bounded INDEX.md TOC pages as real files.

Used only when the benchmark runs on an ordinary directory (``--dir``, development, unit tests); through a
mount the library's own indexer writes INDEX.md and the ``.index/`` pages and this module is not used.
It renders the format the architecture specifies (ARCHITECTURE §2): one line per entry
``- [name](name) — summary (N tok)``; when the lines exceed one page of ``budget_tokens``, contiguous runs
go to leaf pages under ``.index/`` and INDEX.md becomes the root of a tree of pages whose lines read
``- [first … last](.index/L1-0001.md) — N entries`` (a B-tree over names with fan-out set by the budget).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from libraryfs_bench.theorem.accounting import count_tokens as _count_tokens

INDEX_NAME = "INDEX.md"
INDEX_DIR = ".index"


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


_SUMMARIES: dict[tuple[str, int, int], str] = {}
_WRITTEN: dict[str, str] = {}


def _write_page(path: Path, text: str) -> None:
    """Write a TOC page unless this process already wrote the same text there (overwriting a file costs
    ~2 ms on ext4; re-renders mostly leave pages unchanged)."""
    key = str(path)
    if _WRITTEN.get(key) == text and path.exists():
        return
    path.write_text(text, encoding="utf-8")
    if len(_WRITTEN) > 500_000:
        _WRITTEN.clear()
    _WRITTEN[key] = text


def _summary(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return ""
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _SUMMARIES:
        if len(_SUMMARIES) > 2_000_000:
            _SUMMARIES.clear()
        _SUMMARIES[key] = _read_summary(path)
    return _SUMMARIES[key]


def _read_summary(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(200)
    except (IsADirectoryError, PermissionError):
        return "directory"
    line = head.strip().splitlines()[0] if head.strip() else ""
    return line[:60]


Row = tuple[str, str, str, str, str]  # (first name, last name, label, target relative to the dir, suffix)


def _line(row: Row, in_index_dir: bool) -> str:
    href = row[3]
    if in_index_dir:
        href = href[len(INDEX_DIR) + 1 :] if href.startswith(INDEX_DIR + "/") else "../" + href
    return f"- [{row[2]}]({href}) — {row[4]}"


def _pack(rows: list[Row], header: str, budget_tokens: int) -> list[list[Row]]:
    """Cut rows into runs whose rendered page (links as seen from ``.index/``) stays within the budget."""
    runs: list[list[Row]] = [[]]
    header_tokens = count_tokens(header) + 12  # room for the page's own title
    used = header_tokens
    for row in rows:
        cost = count_tokens(_line(row, True)) + 1
        if runs[-1] and used + cost > budget_tokens:
            runs.append([])
            used = header_tokens
        runs[-1].append(row)
        used += cost
    return runs


def render_dir(directory: str | os.PathLike[str], budget_tokens: int = 2000) -> TocStats:
    """(Re)write ``INDEX.md`` (and ``.index/`` pages when needed) for one directory, not recursive.

    Entries are the directory's names in sorted order, INDEX.md and ``.index`` excluded. Every page
    written is at most ``budget_tokens`` tokens (o200k_base) unless a single line alone exceeds it.
    Returns :class:`TocStats`. Raises OSError from the filesystem.
    """
    base = Path(directory)
    names = sorted(n for n in os.listdir(base) if n not in (INDEX_NAME, INDEX_DIR))
    rows: list[Row] = []
    for name in names:
        summary = _summary(base / name)
        rows.append((name, name, name, name, f"{summary} ({count_tokens(summary)} tok)"))
    title = f"# {base.name}\n\n"
    pages_written = 0
    max_tokens = 0
    level = 0
    idx = base / INDEX_DIR
    while True:
        runs = _pack(rows, title, budget_tokens)
        if len(runs) == 1:
            text = title + "".join(_line(r, False) + "\n" for r in runs[0])
            _write_page(base / INDEX_NAME, text)
            max_tokens = max(max_tokens, count_tokens(text))
            return TocStats(pages_written + 1, level, max_tokens, len(names))
        level += 1
        idx.mkdir(exist_ok=True)
        parent_rows: list[Row] = []
        for i, run in enumerate(runs, 1):
            page_name = f"L{level}-{i:05d}.md"
            first, last = run[0][0], run[-1][1]
            text = f"# {base.name}: {first} … {last}\n\n" + "".join(_line(r, True) + "\n" for r in run)
            _write_page(idx / page_name, text)
            pages_written += 1
            max_tokens = max(max_tokens, count_tokens(text))
            parent_rows.append(
                (first, last, f"{first} … {last}", f"{INDEX_DIR}/{page_name}", f"{len(run)} entries")
            )
        rows = parent_rows


def render_tree(root: str | os.PathLike[str], budget_tokens: int = 2000) -> int:
    """:func:`render_dir` for ``root`` and every directory below it (``.index`` skipped). Returns the
    number of directories rendered."""
    count = 0
    for dirpath, dirnames, _files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != INDEX_DIR]
        render_dir(dirpath, budget_tokens)
        count += 1
    return count
