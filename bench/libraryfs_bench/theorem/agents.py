"""Scripted protocol agents: they learn the store only by reading files under a root (the mountpoint).

Each agent returns a :class:`~libraryfs_bench.theorem.accounting.Trace` (tool calls, the exact text each one
read, and the submitted answer). The protocols are the ones the paper's prompts ask for (PAPERS.md §1):

* :func:`sequential_scan` — FLAT: pages 1, 2, … until the key appears (reads = the target's page number).
* :func:`binary_search` — FLAT-SORTED: bisect over sorted pages by their first/last key.
* :func:`index_follow` — INDEXED (and INDEXED-CORRUPTED: trust the TOC, then fall back to bisection).
* :func:`deep_index_follow` — DEEP-INDEXED: master TOC → section TOC → page.
* :func:`path_lookup` — PATH: the key is known, open its entry by name (0 TOC reads, 1 entry read).
* :func:`toc_walk` — AUTO: follow markdown links in the generated INDEX.md pages whose name range covers
  the key, down to the entry (⌈log_b N⌉ TOC reads + 1 entry read for a B-tree of fan-out b); when the
  entry's line quotes the file's whole text on a page that says so (``"…" = the file's whole text``), the
  answer is read from the line and the entry is not opened (⌈log_b N⌉ TOC reads).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from libraryfs.fs.generated import INDEX_FILE, PAGES_DIRNAME
from libraryfs_bench.theorem.accounting import Call, Trace
from libraryfs_bench.theorem.stores import PaperStore

Key = int | str


def _read(path: Path | str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _key(text: str, like: Key) -> Key:
    text = text.strip()
    if isinstance(like, int):
        try:
            return int(text)
        except ValueError:
            return text
    return text


def parse_page(text: str, like: Key) -> list[tuple[Key, str]]:
    """Entries of a page text ``Page 3: k→v, k→v`` (or one ``k→v`` per line) as (key, value) pairs."""
    body = text.split(":", 1)[1] if text.startswith("Page ") else text
    parts = body.strip().split("\n") if "\n" in body.strip() else body.split(", ")
    out = []
    for part in parts:
        if "→" in part:
            k, v = part.split("→", 1)
            out.append((_key(k, like), v.strip()))
    return out


_RANGE_LINE = re.compile(r"(Page|Section)\s+(\d+):\s+keys\s+(.+?)\s*[–-]\s*(\S.*?)\s*$")


def parse_ranges(text: str, like: Key) -> list[tuple[int, Key, Key]]:
    """(number, lo, hi) for each ``Page p: keys lo–hi`` / ``Section s: keys lo–hi`` line of a TOC text."""
    out = []
    for line in text.splitlines():
        m = _RANGE_LINE.search(line)
        if m:
            out.append((int(m.group(2)), _key(m.group(3), like), _key(m.group(4), like)))
    return out


def _less(a: Key, b: Key) -> bool:
    try:
        return a < b  # type: ignore[operator]
    except TypeError:
        return str(a) < str(b)


def _submit(trace: Trace, value: str | None) -> Trace:
    if value is not None:
        trace.calls.append(Call("submit_answer", {"value": value}, "Answer recorded.", "submit"))
    trace.answer = value
    return trace


def _read_page(trace: Trace, store: PaperStore, condition: str, pn: int, like: Key) -> list[tuple[Key, str]]:
    path = store.page_path(condition, pn)
    try:
        text = _read(path)
    except FileNotFoundError:
        text = f"Page {pn} not found. Valid range: 1–{store.num_pages}."
    trace.calls.append(Call("read_page", {"page_num": pn}, text, "page", str(path)))
    return parse_page(text, like)


def _find(entries: list[tuple[Key, str]], key: Key) -> str | None:
    for k, v in entries:
        if k == key:
            return v
    return None


def sequential_scan(store: PaperStore, key: Key, condition: str = "FLAT") -> Trace:
    """Read pages 1..P in order until ``key`` is on one; submit its value (None if absent)."""
    trace = Trace()
    for pn in range(1, store.num_pages + 1):
        value = _find(_read_page(trace, store, condition, pn, key), key)
        if value is not None:
            return _submit(trace, value)
    return _submit(trace, None)


def _bisect(trace: Trace, store: PaperStore, condition: str, key: Key, lo: int, hi: int) -> str | None:
    known = {c.args["page_num"]: parse_page(c.result, key) for c in trace.calls if c.tool == "read_page"}
    while lo <= hi:
        mid = (lo + hi) // 2
        # a page already read is taken from the history, never paid for twice
        entries = known[mid] if mid in known else _read_page(trace, store, condition, mid, key)
        value = _find(entries, key)
        if value is not None:
            return value
        if not entries:
            return None
        if _less(key, entries[0][0]):
            hi = mid - 1
        elif _less(entries[-1][0], key):
            lo = mid + 1
        else:
            return None  # inside the page's range but absent
    return None


def binary_search(store: PaperStore, key: Key, condition: str = "FLAT-SORTED") -> Trace:
    """Bisect the sorted pages (compare the key to a page's first and last key); ⌈log2(P+1)⌉ reads at most."""
    trace = Trace()
    return _submit(trace, _bisect(trace, store, condition, key, 1, store.num_pages))


def _pick(ranges: list[tuple[int, Key, Key]], key: Key) -> int | None:
    for num, lo, hi in ranges:
        if not _less(key, lo) and not _less(hi, key):
            return num
    return None


def index_follow(store: PaperStore, key: Key, condition: str = "INDEXED") -> Trace:
    """get_index, read the page whose range covers ``key``, submit. If that page lacks the key (a
    corrupted TOC), fall back to bisection over the sorted pages."""
    trace = Trace()
    path = store.index_path(condition)
    text = _read(path) if path else "No index available."
    trace.calls.append(Call("get_index", {}, text, "index", str(path or "")))
    pn = _pick(parse_ranges(text, key), key)
    value = None
    if pn is not None:
        value = _find(_read_page(trace, store, condition, pn, key), key)
    if value is None:
        value = _bisect(trace, store, condition, key, 1, store.num_pages)
    return _submit(trace, value)


def deep_index_follow(store: PaperStore, key: Key, condition: str = "DEEP-INDEXED") -> Trace:
    """get_index (master), get_section_index(s) for the covering section, read the page, submit."""
    trace = Trace()
    path = store.index_path(condition)
    assert path is not None
    master = _read(path)
    trace.calls.append(Call("get_index", {}, master, "index", str(path)))
    sec = _pick(parse_ranges(master, key), key)
    value = None
    if sec is not None:
        spath = store.section_path(sec)
        stext = _read(spath)
        trace.calls.append(Call("get_section_index", {"section_num": sec}, stext, "section", str(spath)))
        pn = _pick(parse_ranges(stext, key), key)
        if pn is not None:
            value = _find(_read_page(trace, store, condition, pn, key), key)
    return _submit(trace, value)


PAPER_AGENTS = {
    "FLAT": sequential_scan,
    "FLAT-SORTED": binary_search,
    "INDEXED": index_follow,
    "INDEXED-CORRUPTED": index_follow,
    "DEEP-INDEXED": deep_index_follow,
}


# --------------------------------------------------------------------------- entry stores (PATH, AUTO)


def _entry_value(text: str) -> str | None:
    return text.split("→", 1)[1].strip() if "→" in text else None


def path_lookup(store_dir: str | os.PathLike[str], name: str) -> Trace:
    """PATH: open ``<store_dir>/<name>`` directly (the kernel's path walk does the lookup)."""
    trace = Trace()
    path = Path(store_dir) / name
    try:
        text = _read(path)
    except FileNotFoundError:
        trace.calls.append(Call("read_file", {"path": name}, f"{name}: no such file", "entry", str(path)))
        return _submit(trace, None)
    trace.calls.append(Call("read_file", {"path": name}, text, "entry", str(path)))
    return _submit(trace, _entry_value(text))


#: a markdown link; its text may hold backslash escapes (``\]``, ``\_``: the TOC escapes markup in names)
_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  #: a CommonMark backslash escape of ASCII punctuation
_SEPARATORS = ("…", "...", "..", " – ", " — ", " - ", " to ", "–")


#: a page's statement of where its unlinked entry names are (``files: ../NAME``: the path is ``../`` + name)
_FILES_AT = re.compile(r"^files: (\S*)NAME\b", re.MULTILINE)
_BARE_ENTRY = re.compile(r"^- ([^\s\[\]()]+)(?: — |$)")
#: a page's statement that a line's text in quotes is its file's whole text, and the rest of such a line
QUOTE_NOTE = '"…" = the file\'s whole text'
_QUOTED = re.compile(r'^(?: — )?"(.*)"$')


def quotes_declared(text: str) -> bool:
    """Whether a TOC page says, in its head (the lines before its first list line), what its quoted lines
    are (:data:`QUOTE_NOTE`)."""
    head = text if text.startswith("- ") else text.split("\n- ", 1)[0]
    return QUOTE_NOTE in head


def quoted_text(rest: str) -> str | None:
    """The whole text a line quotes (``rest``: what follows its link or name, `` — "text"``, or its bare
    name's dash), else None."""
    m = _QUOTED.match(rest)
    return m.group(1) if m else None


def parse_links(text: str) -> list[tuple[str, str, str]]:
    """(label, href, rest of line) for every markdown link in a TOC page (href URL-unquoted), and for every
    unlinked entry name of a page that says where such names are (``files: ../NAME``: href ``../name``)."""
    out = []
    at = _FILES_AT.search(text)
    for line in text.splitlines():
        found = list(_LINK.finditer(line))
        for m in found:
            out.append((_ESCAPE.sub(r"\1", m.group(1)).strip(), unquote(m.group(2)), line[m.end() :]))
        bare = None if found or at is None else _BARE_ENTRY.match(line)
        if bare:
            out.append((bare.group(1), at.group(1) + bare.group(1), line[bare.end() :]))
    return out


def _clean(name: str) -> str:
    return name.strip().strip("`*\"'").rstrip("/").strip()


def parse_range(label: str) -> tuple[str, str] | None:
    """``first … last`` (also ``...``, ``–``, `` - ``, `` to ``; an optional ``group: `` title before it)
    → (first, last); None when not a range."""
    for sep in _SEPARATORS:
        if sep in label:
            lo, hi = label.split(sep, 1)
            lo, hi = _clean(lo.rsplit(": ", 1)[-1]), _clean(hi)
            if lo and hi:
                return lo, hi
    return None


def name_less(a: str, b: str) -> bool:
    """Name order used to compare a key with TOC bounds: numeric when both are digits, else by string."""
    if a.isdigit() and b.isdigit():
        return int(a) < int(b)
    return a < b


def _covers(lo: str, hi: str, name: str) -> bool:
    return not name_less(name, lo) and not name_less(hi, name)


def toc_walk(
    store_dir: str | os.PathLike[str],
    name: str,
    max_depth: int = 16,
    answer_of: Callable[[str], str | None] | None = None,
) -> Trace:
    """AUTO: from ``INDEX.md`` follow links until the entry ``name`` is reached; submit its value
    (``answer_of`` of the entry's text, by default the ``key→value`` store's value; a quoted line's text
    stands for the entry's on a page that says what quotes mean).

    On each TOC page: a link whose label (or file name) is ``name`` is the entry; otherwise follow the
    link whose ``first … last`` range (in the label, else later on its line) covers ``name``; failing
    that, the last range starting at or before ``name``. Links are relative to the page read. Records
    the fan-out (links) of each page in ``Call.args['fanout']``.
    """
    trace = Trace()
    root = Path(store_dir)
    page = INDEX_FILE
    for _ in range(max_depth):
        try:
            text = _read(root / page)
        except FileNotFoundError:
            trace.error = f"missing TOC page {page}"
            return _submit(trace, None)
        links = parse_links(text)
        trace.calls.append(
            Call("read_file", {"path": page, "fanout": len(links)}, text, "toc", str(root / page))
        )
        here = posixpath.dirname(page)
        target = None
        quoted = quotes_declared(text)
        for label, href, rest in links:
            if _clean(label) == name or posixpath.basename(href.rstrip("/")) == name:
                target = posixpath.normpath(posixpath.join(here, href))
                whole = quoted_text(rest) if quoted else None
                if whole is not None:  # the page gives the file's whole text: nothing more to read
                    return _submit(trace, (answer_of or _entry_value)(whole))
                break
        if target is not None:
            try:
                entry = _read(root / target)
            except (FileNotFoundError, IsADirectoryError):
                trace.error = f"link {target} unreadable"
                return _submit(trace, None)
            trace.calls.append(Call("read_file", {"path": target}, entry, "entry", str(root / target)))
            return _submit(trace, (answer_of or _entry_value)(entry))
        ranged = []
        for label, href, rest in links:
            bounds = parse_range(label)
            if bounds is None and (href.endswith((".md", "/")) or PAGES_DIRNAME in href):
                bounds = parse_range(rest.split("(")[0].strip(" —-:"))
            if bounds:
                ranged.append((bounds[0], bounds[1], href))
        chosen = next((h for lo, hi, h in ranged if _covers(lo, hi, name)), None)
        if chosen is None:
            starts = [h for lo, _hi, h in ranged if not name_less(name, lo)]
            if not starts:
                trace.error = f"no TOC link covers {name!r} on {page}"
                return _submit(trace, None)
            chosen = starts[-1]
        nxt = posixpath.normpath(posixpath.join(here, chosen))
        if (root / nxt).is_dir():
            nxt = posixpath.join(nxt, INDEX_FILE)
        page = nxt
    trace.error = "TOC deeper than max_depth"
    return _submit(trace, None)
