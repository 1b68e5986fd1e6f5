"""The Library Theorem's stores written as ordinary files under a root directory (a mountpoint or any dir).

Paper conditions (Mainen 2026, PAPERS.md §1) share one directory per (content, N, trial, key range):

```
<root>/theorem/<content>[-k<key_low>]/n<N>[/t<trial>]/
    sorted/p0001.txt …      pages of 10 items in key order   (FLAT-SORTED, INDEXED, *-CORRUPTED, DEEP)
    shuffled/p0001.txt …    pages of the Random(t+20000)-shuffled items                     (FLAT)
    index.txt               one TOC of page key ranges                                      (INDEXED)
    index-corrupted.txt     the same ranges shuffled with Random(t+20000)          (INDEXED-CORRUPTED)
    master.txt              master TOC of sections of 10 pages                          (DEEP-INDEXED)
    sections/s001.txt …     one TOC per section                                         (DEEP-INDEXED)
```

A page file holds exactly the text the paper's ``read_page`` tool returned (``Page 3: 1234→ABCD, …``) and a
TOC file exactly what ``get_index`` / ``get_section_index`` returned, so the LLM agent's tool results are
byte-identical to the paper's. libraryfs's own conditions use one entry per item:

```
<root>/theorem-items/<content>[-k<key_low>]/n<N>[/t<trial>]/<key>     content "<key>→<value>"  (PATH, AUTO)
```

where a mounted library's indexer writes the bounded INDEX.md TOC pages that AUTO follows.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from libraryfs.fs.generated import INDEX_FILE
from libraryfs_bench.theorem.content import Item, items_for, sorted_items, target_position

PAPER_CONDITIONS = ("FLAT", "FLAT-SORTED", "INDEXED", "DEEP-INDEXED", "INDEXED-CORRUPTED")
OWN_CONDITIONS = ("PATH", "AUTO")
CONDITIONS = PAPER_CONDITIONS + OWN_CONDITIONS
PAGE_ITEMS = 10  # items per page (paper: P)
SECTION_PAGES = 10  # pages per section (paper: SECTION_SIZE)


@dataclass(frozen=True)
class StoreSpec:
    """Identity of one store: content type, number of items, trial seed and (hash) key range start."""

    content: str
    n: int
    trial: int
    key_low: int = 1000

    @property
    def rel(self) -> str:
        """Relative directory name, e.g. ``hash-k1000/n2000/t07`` (numeric/encyclopedia: no trial)."""
        if self.content == "hash":
            return f"hash-k{self.key_low}/n{self.n}/t{self.trial:02d}"
        return f"{self.content}/n{self.n}"

    def items(self) -> list[Item]:
        """Items in drawing order (see :mod:`libraryfs_bench.theorem.content`)."""
        return items_for(self.content, self.n, self.trial, self.key_low)

    def target(self) -> Item:
        """The trial's target item: ``items()[Random(trial + 10000).randrange(n)]``."""
        return self.items()[target_position(self.n, self.trial)]


def split_pages(items: list[Item]) -> list[list[Item]]:
    """Items cut into pages of :data:`PAGE_ITEMS` (the last may be short); page k is ``pages[k - 1]``."""
    return [items[i : i + PAGE_ITEMS] for i in range(0, len(items), PAGE_ITEMS)]


def shuffled_items(items: list[Item], trial: int) -> list[Item]:
    """FLAT order: the drawing-order items shuffled with ``Random(trial + 20000)`` (paper's ``build_pages``)."""
    out = list(items)
    random.Random(trial + 20000).shuffle(out)
    return out


def render_page(page_num: int, entries: list[Item], content: str) -> str:
    """Page text as the paper's ``read_page`` returned it: ``Page 3: 1234→ABCD, 1250→QWER, …``.

    Encyclopedia pages put one ``headword→sentence`` per line (sentences contain commas).
    """
    if content == "encyclopedia":
        return f"Page {page_num}:\n" + "\n".join(f"{k}→{v}" for k, v in entries)
    return f"Page {page_num}: " + ", ".join(f"{k}→{v}" for k, v in entries)


def render_index(pages: list[list[Item]]) -> str:
    """Single-level TOC (INDEXED): ``KEY-RANGE INDEX:`` then ``  Page p: keys lo–hi`` per page."""
    lines = ["KEY-RANGE INDEX:"]
    lines += [f"  Page {pn}: keys {p[0][0]}–{p[-1][0]}" for pn, p in enumerate(pages, 1)]
    return "\n".join(lines)


def render_corrupted_index(pages: list[list[Item]], trial: int) -> str:
    """INDEXED-CORRUPTED TOC: the page ranges shuffled with ``Random(trial + 20000)`` (first two swapped
    if the shuffle left them in place), listed against pages 1..P."""
    ranges = [(p[0][0], p[-1][0]) for p in pages]
    shuffled = list(ranges)
    random.Random(trial + 20000).shuffle(shuffled)
    if shuffled == ranges and len(ranges) > 1:
        shuffled[0], shuffled[1] = shuffled[1], shuffled[0]
    lines = ["KEY-RANGE INDEX (may contain errors):"]
    lines += [f"  Page {pn}: keys {lo}–{hi}" for pn, (lo, hi) in enumerate(shuffled, 1)]
    return "\n".join(lines)


def render_deep_index(pages: list[list[Item]]) -> tuple[str, list[str]]:
    """DEEP-INDEXED TOCs: (master listing sections of 10 pages, [section TOC text, …] for sections 1..S)."""
    master = ["MASTER INDEX (sections with key ranges):"]
    sections: list[str] = []
    for s, start in enumerate(range(0, len(pages), SECTION_PAGES), 1):
        run = list(range(start + 1, min(start + SECTION_PAGES, len(pages)) + 1))
        master.append(f"  Section {s}: keys {pages[run[0] - 1][0][0]}–{pages[run[-1] - 1][-1][0]}")
        lines = [f"SECTION {s} INDEX (pages with key ranges):"]
        lines += [f"  Page {pn}: keys {pages[pn - 1][0][0]}–{pages[pn - 1][-1][0]}" for pn in run]
        sections.append("\n".join(lines))
    return "\n".join(master), sections


@dataclass
class PaperStore:
    """A paper store written under ``dir``; paths of the files each tool reads."""

    spec: StoreSpec
    dir: Path
    num_pages: int
    target: Item
    flat_target_page: int = 0  # page of the target in the shuffled (FLAT) pages; 0 when not written
    sorted_target_page: int = 0
    files_written: int = 0

    def page_path(self, condition: str, page_num: int) -> Path:
        """File behind ``read_page(page_num)`` in ``condition`` (FLAT reads shuffled pages)."""
        sub = "shuffled" if condition == "FLAT" else "sorted"
        return self.dir / sub / f"p{page_num:04d}.txt"

    def index_path(self, condition: str) -> Path | None:
        """File behind ``get_index()`` (None where the condition has no index)."""
        return {
            "INDEXED": self.dir / "index.txt",
            "INDEXED-CORRUPTED": self.dir / "index-corrupted.txt",
            "DEEP-INDEXED": self.dir / "master.txt",
        }.get(condition)

    def section_path(self, section_num: int) -> Path:
        """File behind ``get_section_index(section_num)`` (DEEP-INDEXED)."""
        return self.dir / "sections" / f"s{section_num:03d}.txt"


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_paper_store(root: str | os.PathLike[str], spec: StoreSpec, flat: bool = True) -> PaperStore:
    """Write one paper store (all five conditions' files) under ``<root>/theorem/<spec.rel>``.

    ``flat`` False skips the shuffled pages (FLAT not needed). Existing files are rewritten in place.
    Returns the :class:`PaperStore` (with the target's page numbers). Raises OSError from the filesystem.
    """
    items = spec.items()
    target = items[target_position(spec.n, spec.trial)]
    ordered = sorted_items(items)
    pages = split_pages(ordered)
    base = Path(root) / "theorem" / spec.rel
    (base / "sorted").mkdir(parents=True, exist_ok=True)
    (base / "sections").mkdir(exist_ok=True)
    store = PaperStore(spec, base, len(pages), target)
    for pn, entries in enumerate(pages, 1):
        _write(base / "sorted" / f"p{pn:04d}.txt", render_page(pn, entries, spec.content))
    store.sorted_target_page = ordered.index(target) // PAGE_ITEMS + 1
    _write(base / "index.txt", render_index(pages))
    _write(base / "index-corrupted.txt", render_corrupted_index(pages, spec.trial))
    master, sections = render_deep_index(pages)
    _write(base / "master.txt", master)
    for s, text in enumerate(sections, 1):
        _write(base / "sections" / f"s{s:03d}.txt", text)
    store.files_written = len(pages) + 3 + len(sections)
    if flat:
        (base / "shuffled").mkdir(exist_ok=True)
        shuffled = shuffled_items(items, spec.trial)
        for pn, entries in enumerate(split_pages(shuffled), 1):
            _write(base / "shuffled" / f"p{pn:04d}.txt", render_page(pn, entries, spec.content))
        store.flat_target_page = shuffled.index(target) // PAGE_ITEMS + 1
        store.files_written += len(pages)
    return store


def entry_name(key: int | str, n: int, content: str) -> str:
    """File name of an item's entry: the key, zero-padded for numeric content so that name order equals
    key order (hash keys of one store share a digit count; headwords are names already)."""
    if content == "numeric":
        return str(key).zfill(len(str(n)))
    return str(key)


@dataclass
class ItemStore:
    """An item-per-entry store (PATH, AUTO) under ``dir``."""

    spec: StoreSpec
    dir: Path
    target: Item
    names: list[str] = field(default_factory=list)  # entry names in key order

    def name_of(self, key: int | str) -> str:
        """Entry name for ``key``."""
        return entry_name(key, self.spec.n, self.spec.content)


def item_store_dir(root: str | os.PathLike[str], spec: StoreSpec) -> Path:
    """Directory of the item store for ``spec`` under ``root``."""
    return Path(root) / "theorem-items" / spec.rel


def write_item_store(root: str | os.PathLike[str], spec: StoreSpec, skip_existing: bool = False) -> ItemStore:
    """Write one entry file per item (``<key>`` holding ``<key>→<value>``) under ``theorem-items/<rel>``.

    ``skip_existing`` leaves a directory that already holds n entries untouched (large stores are costly
    to rewrite). Returns the :class:`ItemStore`. Raises OSError from the filesystem.
    """
    items = spec.items()
    target = items[target_position(spec.n, spec.trial)]
    base = item_store_dir(root, spec)
    store = ItemStore(spec, base, target)
    ordered = sorted_items(items)
    store.names = [store.name_of(k) for k, _ in ordered]
    if skip_existing and base.is_dir():
        present = sum(1 for e in os.scandir(base) if e.is_file() and e.name != INDEX_FILE)
        if present == spec.n:
            return store
    base.mkdir(parents=True, exist_ok=True)
    for (key, value), name in zip(ordered, store.names, strict=False):
        _write(base / name, f"{key}→{value}\n")
    return store


def flat_closed_form(n: int) -> float:
    """Expected FLAT sequential-scan page reads for a uniformly placed target: (P + 1) / 2, P = ⌈n/10⌉."""
    return (math.ceil(n / PAGE_ITEMS) + 1) / 2
