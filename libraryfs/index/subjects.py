"""The subject index: the words of the entries' text → the entries where each weighs most (issue 13).

A library keeps beside its shelves (the section TOCs) a catalogue of names (:mod:`.catalogue`) and a
*subject index*, the back-of-book index: a topic query ("where is command-line parsing documented") uses
words a TOC line of a few dozen tokens cannot carry, but some entry's text does. The subject index lists
the library's distinctive words A–Z in pages of at most C tokens, each word with how many entries use it
and links to the few where it weighs most, under index pages of ``first … last`` ranges (the page planner of
the name catalogue, :mod:`.catpages`), linked from the master ``INDEX.md`` by one labelled line. A reader
with no world knowledge looks up the rare words of its question (ranges are alphabetical) and reads the
entries they share.

Source: the finder's term index (:mod:`.termindex`, SQLite FTS5). The vocabulary and each word's document
count come from FTS5's ``fts5vocab`` table (sqlite.org/fts5 §7, type ``row``); the entries where a word weighs
most are its best BM25 matches (``bm25()`` with the finder's column weights: a word in an entry's name counts
10×, in the names it defines 5×, in its body 1×). Left out: stopwords, words of fewer than
:data:`MIN_CHARS` letters, anything with a digit or ``_`` (numbers, identifiers: the name catalogue's job),
and words in more than :data:`MAX_SHARE` of the entries (they tell nothing apart).

Served at ``/.subjects/INDEX.md`` and ``/.subjects/.index/NNNN.md``: the ``toc`` pages of the pseudo
directory :data:`~libraryfs.fs.schema.SUBJECTS_INO`, with a section record there (token counts, the
number of words). No table of its own: it is derived from the term index and rebuilt whole by
:func:`rebuild` — O(postings of the kept words), amortised by the indexer (:class:`Upkeep`): rebuilt when
:data:`REBUILD_SHARE` of the entries changed since the last build, or the changes are older than
:data:`REBUILD_AFTER_S`, or at a full pass and a process's first pass; ``libraryfs check`` drops a damaged
record with its pages (the next build restores them).
"""

from __future__ import annotations

import functools
import math
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from libraryfs.fs import schema as S
from libraryfs.fs.generated import INDEX_FILE, SUBJECTS_DIRNAME
from libraryfs.fs.meta import SectionMeta
from libraryfs.fs.store import Store, Txn
from libraryfs.index import catpages as P
from libraryfs.index.catalogue import entry_path

MIN_CHARS = 3  #: shorter words are left out
MAX_CHARS = 40  #: longer "words" (hashes, base64) are left out
MAX_SHARE = 0.15  #: words in more than this share of the entries are left out (kept when in ≤ MIN_KEEP)
MIN_KEEP = 3  #: a word in at most this many entries is kept at any library size
LINKS = 2  #: entries linked per word
REBUILD_SHARE = 0.1  #: rebuild once this share of the entries changed since the last build
REBUILD_AFTER_S = 30.0  #: … or once a change is this old (checked at the indexer's passes)
SUBJECTS_FORMAT = 1  #: bump when the pages' form changes (an indexer then rebuilds them)
_WORD = re.compile(r"[^\W\d_]+")  #: letters only
#: English function words (a subject index lists content words only)
STOPWORDS = frozenset(
    """
about above after again against all also and any are because been before being below between both but
can could did does doing down during each either else etc for from further had has have having her here
hers him his how into its itself just may might more most must nor not now off once only other our out
over own per same shall she should some such than that the their them then there these they this those
through too under until upon very via was were what when where which while who whom why will with within
without would yet you your one two used use using
""".split()
)

MAX_LEVELS = 2  #: page levels (root + leaves): a word is 2 reads below the master page
RANGE_LINE_TOKENS = 20  #: planning estimate of one range line on the root page
Line = tuple[str, int, list[tuple[str, bytes]], float]  # (word, entries using it, [(name, path)], utility)


def keep_word(word: str, df: int, n_entries: int) -> bool:
    """Whether ``word`` (an FTS5 token, lower case) in ``df`` of ``n_entries`` entries gets a line."""
    if not (MIN_CHARS <= len(word) <= MAX_CHARS) or word in STOPWORDS or not _WORD.fullmatch(word):
        return False
    return df <= max(MIN_KEEP, MAX_SHARE * n_entries)


def _vocabulary(db: sqlite3.Connection) -> list[tuple[str, int, int]]:
    """``(word, rows using it, occurrences)`` of the term index, A–Z (``fts5vocab`` type ``row``; a temporary table of
    this connection, so a read-only connection works too)."""
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.subjects_vocab USING fts5vocab(main, terms, row)")
    q = "SELECT term, doc, cnt FROM temp.subjects_vocab ORDER BY term"
    return [(w, int(n), int(c)) for w, n, c in db.execute(q)]


def collect(db: sqlite3.Connection, paths: Callable[[int], bytes | None]) -> tuple[int, list[Line]]:
    """``(entries indexed, lines)``: one line per kept word (:func:`keep_word`), A–Z, with the number of
    entries using it and up to :data:`LINKS` of them, best BM25 first. ``paths``: an entry's absolute
    path by inode (None: gone). Directories' rows (their descriptions) never count nor get linked."""
    from libraryfs.index.termindex import WEIGHTS

    entries = {ino for (ino,) in db.execute("SELECT ino FROM rows WHERE kind='entry'")}
    n = len(entries)
    dirs = db.execute("SELECT count(*) FROM rows WHERE kind!='entry'").fetchone()[0]
    lines: list[Line] = []
    cache: dict[int, bytes | None] = {}
    query = "SELECT rowid, bm25(terms, ?, ?, ?) AS s FROM terms WHERE terms MATCH ? ORDER BY s"
    for word, rows, occurrences in _vocabulary(db):
        if not keep_word(word, max(0, rows - dirs), n):  # rows - dirs: entries using it, at least
            continue
        hits = [ino for ino, _s in db.execute(query, (*WEIGHTS, '"' + word + '"')) if ino in entries]
        if not hits or not keep_word(word, len(hits), n):
            continue
        links = []
        for ino in hits:
            if ino not in cache:
                cache[ino] = paths(ino)
            path = cache[ino]
            if path is not None:
                links.append((os.fsdecode(path.rsplit(b"/", 1)[-1]), path))
            if len(links) == LINKS:
                break
        if links:
            lines.append((word, len(hits), links, occurrences * math.log(1 + n / len(hits))))
    return n, lines


_EXT = re.compile(r"(?:\.[A-Za-z]{1,4}){1,2}$")


def short_name(name: str) -> str:
    """An entry's name without its extensions (``bisect.rst.txt`` → ``bisect``; the link shows the rest):
    a subject line names several entries, and tokens are the page's budget."""
    return _EXT.sub("", name) or name


def subject_line(word: str, payload: Any, prefix: str) -> str:
    """``- word — N entries: [name](link), …``: a word, how many entries use it (a reader prefers rare
    words) and the entries where it weighs most (links relative to the page, percent-encoded; names
    without their extensions)."""
    df, links = payload
    shown = ", ".join(f"[{P._label(short_name(n), 80)}]({P.path_link(path, prefix)})" for n, path in links)
    return f"- {word} — {df:,} entr{'y' if df == 1 else 'ies'}: {shown}"


STYLE = P.Style(
    "Subject index",
    "The distinctive words of this library's entries, A–Z; each with how many entries use it and the "
    "entries where it weighs most (best first). Look up the rarest words of a question; read the entries "
    "they share.",
    "word",
    "subjects",
    subject_line,
)


def fit(
    lines: list[Line], max_tokens: int, count_tokens: Callable[[str], int], share: float = 0.9
) -> list[Line]:
    """The lines a subject index of :data:`MAX_LEVELS` levels holds at bound ``max_tokens``: all of them
    when they fit, else those of highest utility (occurrences × log(1 + N / entries using it): how much a
    word's line is worth over questions drawn from the text — rare words weigh most, but a word used once
    is rarely asked for), in key order. ``share``: the share of the estimated capacity used (the packer
    cuts leaves at name boundaries)."""
    budget = max_tokens - P.HEAD_TOKENS
    kids = max(2, budget // RANGE_LINE_TOKENS) if MAX_LEVELS >= 2 else 1
    capacity = share * kids * budget
    costs = [count_tokens(subject_line(w, (df, links), "../../")) + 1 for w, df, links, _u in lines]
    if sum(costs) <= capacity:
        return lines
    keep: set[int] = set()
    used = 0.0
    for i in sorted(range(len(lines)), key=lambda i: (-lines[i][3], lines[i][0])):
        if used + costs[i] > capacity:
            continue
        used += costs[i]
        keep.add(i)
    return [ln for i, ln in enumerate(lines) if i in keep]


def render(
    lines: list[Line], max_tokens: int, count_tokens: Callable[[str], int]
) -> tuple[list[bytes], list[int], dict]:
    """``(pages, tokens of each, root node)``: the lines cut into leaves of at most ``max_tokens`` and
    index pages above them (:func:`~.catpages.render_all`; page 0 is the root)."""
    rows = [(w, (df, links), True) for w, df, links, _u in lines]
    leaves = P.pack_leaves(rows, max_tokens, count_tokens, style=STYLE) or [[]]
    keys = [w.encode() for w, _df, _l, _u in lines]
    nodes, pages = P.render_all(leaves, keys, max_tokens, count_tokens, style=STYLE, first_key=b"")
    order = sorted(pages)
    return [pages[p][0] for p in order], [pages[p][1] for p in order], nodes[0]


_MEMOS: dict[Callable[[str], int], Callable[[str], int]] = {}


def _memo(count_tokens: Callable[[str], int]) -> Callable[[str], int]:
    """``count_tokens`` remembered for texts under 512 characters (a word's line; up to 2¹⁷ of them, least
    recently used dropped — at most ~64 MiB): a rebuild counts each line in :func:`fit`, again when leaves
    are packed and again on a retry, and the next rebuild counts mostly the same lines (same counts, only
    faster). Longer texts (whole pages) are counted each time."""
    memo = _MEMOS.get(count_tokens)
    if memo is None:
        cached = functools.lru_cache(maxsize=1 << 17)(count_tokens)

        def memo(text: str) -> int:
            """One count, from the cache when ``text`` is short."""
            return cached(text) if len(text) < 512 else count_tokens(text)

        _MEMOS[count_tokens] = memo
    return memo


def rebuild(store: Store, db: sqlite3.Connection, max_tokens: int, count_tokens: Callable[[str], int]) -> int:
    """Rebuild the subject index from the term index ``db``; returns the pages written (0: no words, and
    any old pages are dropped). Reads the store in one read transaction, writes in one write transaction."""
    with store.read() as t:
        n, lines = collect(db, lambda ino: entry_path(t, ino))
    count_tokens = _memo(count_tokens)
    lines = fit(lines, max_tokens, count_tokens)
    pages, tokens, root = render(lines, max_tokens, count_tokens) if lines else ([], [], {})
    for share in (0.8, 0.7, 0.6):  # the estimate was off: fewer words until the levels hold
        if int(root.get("depth", 1)) <= MAX_LEVELS:
            break
        lines = fit(lines, max_tokens, count_tokens, share)
        pages, tokens, root = render(lines, max_tokens, count_tokens)

    def write(t: Txn) -> None:
        """The write transaction body: the pages and the section record (or neither, without words)."""
        t.put_toc_pages(S.SUBJECTS_INO, pages)
        if not pages:
            t.kv.delete(S.DB_META, S.u64(S.SUBJECTS_INO))
            return
        t.put_meta(
            S.SUBJECTS_INO,
            SectionMeta(
                description="subject index",
                entries_total=len(lines),
                toc_pages=len(pages),
                toc_levels=int(root.get("depth", 1)),
                toc_max_page_tokens=max(tokens),
                toc_page_tokens=tokens,
                extra={"entries": n, "format": SUBJECTS_FORMAT, "max_tokens": max_tokens},
            ),
        )

    store.run_write(write)
    return len(pages)


#: the label of the subject index's line in the master ``INDEX.md`` (not ``… A–Z``: that label is the
#: name catalogue's, followed for one-word queries)
MASTER_LABEL = "subjects"


def master_lines(t: Txn, prefix: str = "") -> list[str]:
    """The subject index's line in the master ``INDEX.md`` (none before it is built): labelled as what it
    is — a subject index of words, A–Z, each linked to the entries where it weighs most — with its size.
    No ``N entries`` figure on it: it is not a section. ``prefix`` is put before the link (``../`` when the
    master page is ``.index/INDEX.md``: the user owns ``INDEX.md``)."""
    m = t.section_meta(S.SUBJECTS_INO)
    if m is None or not m.toc_pages:
        return []
    n = m.entries_total
    return [
        f"- [{MASTER_LABEL}]({prefix}{SUBJECTS_DIRNAME}/{INDEX_FILE}) — subject index: {n:,} word"
        f"{'' if n == 1 else 's'} of the entries' text, A–Z, each linked to the entries where it weighs most"
    ]


class Upkeep:
    """When the indexer rebuilds the subject index (amortised; module docstring): counts the entries
    changed since the last build, and says when a rebuild is due."""

    def __init__(self) -> None:
        self.pending: set[int] = set()
        self.since: float | None = None  # monotonic time of the oldest change not yet in the pages
        self.built = False  # built by this process (its first pass always rebuilds)

    def note(self, inos: Iterable[int]) -> None:
        """Entries (or directories) changed by a pass."""
        before = len(self.pending)
        self.pending.update(inos)
        if len(self.pending) > before and self.since is None:
            self.since = time.monotonic()

    def due(self, t: Txn, max_tokens: int, full: bool) -> bool:
        """Whether to rebuild now: never built by this process, a full pass, pages of another bound or
        format, or enough changes (:data:`REBUILD_SHARE` of the entries) or old ones (:data:`REBUILD_AFTER_S`)."""
        if full or not self.built:
            return True
        m = t.section_meta(S.SUBJECTS_INO)
        if m is not None and (
            m.extra.get("format") != SUBJECTS_FORMAT or m.extra.get("max_tokens") != max_tokens
        ):
            return True
        if not self.pending:
            return False
        n = int(m.extra.get("entries", 0)) if m is not None else 0
        old = self.since is not None and time.monotonic() - self.since >= REBUILD_AFTER_S
        return old or len(self.pending) >= max(1.0, REBUILD_SHARE * n)

    def overdue(self) -> bool:
        """Whether changes have waited :data:`REBUILD_AFTER_S` (the indexer then runs a pass while idle)."""
        return (
            bool(self.pending) and self.since is not None and time.monotonic() - self.since >= REBUILD_AFTER_S
        )

    def retry_later(self) -> None:
        """A rebuild could not run (no term index yet, or it failed): try again after
        :data:`REBUILD_AFTER_S` (or at the next pass with enough changes), not at every idle poll."""
        if self.pending:
            self.since = time.monotonic()

    def done(self) -> None:
        """A rebuild finished: nothing pending."""
        self.pending.clear()
        self.since = None
        self.built = True
