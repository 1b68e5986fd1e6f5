"""Deterministic finder: resolve a name whose section is unknown, without the model (ARCHITECTURE §2).

With the term index (:mod:`libraryfs.index.termindex`, kept by the indexer): :func:`find_ranked` — exact
file names first, then the term index's ranking (defined names, then BM25 over names, defined names and
content), entries and directories, with the total number of matches so a cut list can say so. Without it
(a library never indexed by this release), :func:`find`:

Order of results: (1) exact name matches (case-insensitive, via the ``names`` table the indexer keeps: one
range scan, :meth:`~libraryfs.fs.store.Txn.iter_names`), shortest path first; (2) entries whose name contains the term; (3) entries whose TOC
summary line contains every word of the term, ranked by how many times the words occur. Paths are absolute
bytes inside the library. Used by ``libraryfs find`` and ``/.find/<term>/``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass, field

from libraryfs.errors import InvalidArgument, NameTooLong
from libraryfs.fs import schema as S
from libraryfs.fs.store import Txn
from libraryfs.index import termindex
from libraryfs.index.names import links_of

TERM_MAX = S.NAME_MAX  #: bytes of a search term (UTF-8): what ``/.find/TERM`` carries as one path component


def check_term(term: bytes | str) -> bytes:
    """The one rule for a search term, applied by every front end of the finder (``libraryfs find``, the MCP
    ``find`` tool; ``/.find/TERM`` gets it from the kernel, which refuses a component over NAME_MAX bytes
    before the mount sees it): 1 to :data:`TERM_MAX` (255) bytes once encoded (``os.fsencode``: UTF-8,
    undecodable bytes kept), not blank, no NUL. Returns the term's bytes.

    Raises :class:`~libraryfs.errors.InvalidArgument` (EINVAL) for a blank term or one holding a NUL, and
    :class:`~libraryfs.errors.NameTooLong` (ENAMETOOLONG, as ``open("/.find/" + term)`` fails; Linux
    ``NAME_MAX``, ``include/uapi/linux/limits.h``) for one over :data:`TERM_MAX` bytes."""
    raw = term if isinstance(term, bytes) else os.fsencode(term)
    if not raw.strip():
        raise InvalidArgument("the search term is empty")
    if b"\0" in raw:
        raise InvalidArgument("the search term holds a NUL byte")
    if len(raw) > TERM_MAX:
        raise NameTooLong(
            f"the search term is {len(raw):,} bytes; at most {TERM_MAX} (UTF-8), as for .find/TERM"
        )
    return raw


def entry_path(t: Txn, parent: int, name: bytes) -> bytes | None:
    """Absolute path of ``name`` in directory ``parent`` (None if the directory is detached)."""
    base = t.path_of(parent)
    if base is None:
        return None
    return base.rstrip(b"/") + b"/" + name


def find(t: Txn, term: bytes | str, limit: int = 50) -> list[bytes]:
    """Paths matching ``term`` in the order given in the module docstring (at most ``limit``)."""
    if isinstance(term, str):
        term = os.fsencode(term)
    key = S.name_fold(term)
    out: list[bytes] = []
    seen: set[bytes] = set()

    def add(p: bytes | None) -> None:
        """Append path ``p`` unless it is None, already listed, or the result is full (``limit``)."""
        if p is not None and p not in seen and len(out) < limit:
            seen.add(p)
            out.append(p)

    # 1. exact names
    exact: list[bytes] = []
    for ino, parent, name in t.iter_names(term):
        # the names index is kept by the indexer: confirm against the live dirent (one lookup)
        if t.lookup(parent, name) == ino:
            exact.append(entry_path(t, parent, name) or b"")
    for p in sorted(exact, key=lambda p: (p.count(b"/"), p)):
        add(p)
    if len(out) >= limit:
        return out
    # 2. substring of names, 3. words of summaries (one scan of meta: the fallback ranking)
    words = [w for w in key.decode("utf-8", "replace").split() if w]
    sub: list[tuple[int, bytes]] = []
    summ: list[tuple[int, int, bytes]] = []
    for _ino, m in t.iter_meta():
        if not isinstance(m, S.EntryMeta) or not m.name:
            continue
        for parent, name in links_of(m):  # every name of a hard-linked file
            nkey = S.name_fold(name)
            if key in nkey and nkey != key:
                sub.append((len(nkey), entry_path(t, parent, name) or b""))
            elif words:
                text = (m.summary or "").casefold()
                if all(w in text or w in nkey.decode("utf-8", "replace") for w in words):
                    score = sum(text.count(w) for w in words)
                    summ.append((-score, len(text), entry_path(t, parent, name) or b""))
    for _n, p in sorted(sub):
        add(p or None)
    for _s, _n, p in sorted(summ):
        add(p or None)
    return out


@dataclass
class Match:
    """One ranked result: absolute ``path`` (bytes) in the library, ``kind`` (``"entry"``/``"dir"``) and how
    it matched (``"name"``: its file name; else :attr:`libraryfs.index.termindex.Hit.match`), bm25 score."""

    path: bytes
    kind: str
    match: str
    score: float = 0.0


@dataclass
class Found:
    """Results of :func:`find_ranked`: at most ``limit`` matches, best first, and ``total`` matches in all
    (``cut`` when some were left out)."""

    matches: list[Match] = field(default_factory=list)
    total: int = 0
    #: entries the term index is behind by (its last write failed, e.g. a full disk; the indexer's status
    #: record ``terms_pending``): the store's own scan was added, and callers say so
    behind: int = 0

    @property
    def cut(self) -> bool:
        """True when more matched than are listed."""
        return self.total > len(self.matches)

    @property
    def paths(self) -> list[bytes]:
        """The matches' paths, best first."""
        return [m.path for m in self.matches]


def find_ranked(t: Txn, db: sqlite3.Connection | None, term: bytes | str, limit: int = 50) -> Found:
    """Ranked matches of ``term``: exact file names (the ``names`` table), then the term index's hits
    (:func:`libraryfs.index.termindex.search`) whose inode is still where the store says; without ``db``,
    or when SQLite cannot read it (``sqlite3.Error``: a damaged index, which ``libraryfs check`` reports),
    the fallback order of :func:`find` (its total is what it found); while the indexer says the index is
    behind the store (a write failed: a full disk), the fallback's matches after the index's
    (:attr:`Found.behind`). Every caller — ``/.find/``, the CLI,
    MCP — gets the same answer for the same store and index."""
    if isinstance(term, bytes):
        term = os.fsdecode(term)
    if db is not None:
        try:
            found = _ranked(t, db, term, limit)
        except sqlite3.Error:
            pass
        else:
            behind = int(t.cfg_json(S.CFG_INDEXER_STATUS).get("terms_pending") or 0)
            if behind:  # rows the indexer could not write (a full disk): what the store says is added
                _add_fallback(t, found, term, limit)
                found.behind = behind
            return found
    paths = find(t, term, limit + 1)
    return Found([Match(p, "entry", "fallback") for p in paths[:limit]], len(paths))


def _add_fallback(t: Txn, found: Found, term: str, limit: int) -> None:
    """Append to ``found`` the store scan's matches (:func:`find`: names and summaries) it does not list, up
    to ``limit``, and count them in its total: the term index trails the store."""
    have = set(found.paths)
    extra = [p for p in find(t, term, limit + len(have) + 1) if p not in have]
    found.total += len(extra)
    found.matches += [Match(p, "entry", "fallback") for p in extra[: max(0, limit - len(found.matches))]]


def _ranked(t: Txn, db: sqlite3.Connection, term: str, limit: int) -> Found:
    """:func:`find_ranked` with the term index: exact file names first, then the index's hits."""
    out: list[Match] = []
    seen: set[int] = set()
    named: set[bytes] = set()  # paths already matched by name (a set: a common name has thousands)
    for ino, parent, name in t.iter_names(os.fsencode(term)):
        p = entry_path(t, parent, name)
        # each link of a hard-linked file named alike is its own match (a/x.md and b/x.md)
        if p is not None and t.lookup(parent, name) == ino and p not in named:
            seen.add(ino)
            named.add(p)
            out.append(Match(p, "entry", "name"))
    out.sort(key=lambda m: (m.path.count(b"/"), m.path))
    # a wider window than is shown: a section moved after its entries (_children_first) must find them in
    # it — a chain of directories whose section lines all carry the term outranks the one file holding it
    hits, total = termindex.search(db, term, 2 * limit + 32 + len(seen))
    for h in hits:
        if h.ino in seen:
            continue
        seen.add(h.ino)
        out += [Match(p, h.kind, h.match, h.score) for p in _live_paths(t, h.ino, h.kind)]
    return Found(_children_first(out, term)[:limit], max(total, len(out)))


#: how an entry matched when its own text holds the whole term
FULL_MATCHES = ("name", "defines", "suffix", "all")


def _children_first(out: list[Match], term: str) -> list[Match]:
    """``out`` with each directory that matched by its section text (BM25; not by its own name holding every
    token of the term, nor by a defined name it lists, which :func:`~libraryfs.index.termindex.search`
    already puts after the entries defining it) moved to just after its last descendant in the list (a
    deeper such directory first). A section's text is drawn from its entries' words, and BM25 favours short
    texts: the section line ``c/ — … cathode …`` outranked the entries that say what a cathode is. A
    directory whose name holds the term (``tests/`` for ``tests``) keeps its place.

    For a term of several tokens such a directory also comes after every entry that matched the whole term
    (:data:`FULL_MATCHES`): a directory's row joins its name and all its entries' words, so it "holds" ``zebra
    count`` when it is named ``zebra/`` and one of its files says ``count``, while an entry's row holds both
    in one text (``find 'zebra count'`` listed ``zebra/`` before ``notes/census.md``, "the zebra count this
    year …"). With one token the directory's text holding it means one of its entries (or its description)
    does: it keeps its rank among the others as before."""
    key = term.casefold()
    toks = termindex.tokens(term)

    def named(m: Match) -> bool:
        """Whether the match's own name holds the term (as a substring, or each of its tokens)."""
        name = os.fsdecode(m.path.rsplit(b"/", 1)[-1]).casefold()
        return key in name or bool(toks) and all(tok in name for tok in toks)

    rank = {id(m): i for i, m in enumerate(out)}
    moved = [m for m in out if m.kind == "dir" and m.match in ("all", "prefix", "any") and not named(m)]
    if not moved:
        return out
    res = [m for m in out if all(m is not d for d in moved)]
    for d in sorted(
        moved, key=lambda m: -m.path.count(b"/")
    ):  # deeper first: c/ is placed before dictionary/
        prefix = d.path.rstrip(b"/") + b"/"
        below = [i for i, m in enumerate(res) if m.path.startswith(prefix)]
        # none of its entries matched: it keeps its place among the others
        at = below[-1] + 1 if below else sum(1 for m in res if rank[id(m)] < rank[id(d)])
        if len(toks) > 1:  # after every entry whose own text holds the whole term
            full = [i for i, m in enumerate(res) if m.kind == "entry" and m.match in FULL_MATCHES]
            at = max(at, full[-1] + 1) if full else at
        res.insert(at, d)
    return res


def _live_paths(t: Txn, ino: int, kind: str) -> list[bytes]:
    """Where ``ino`` is now: a directory's path, or every indexed name of an entry (a hard-linked file has
    several) that still names it (``[]`` when the index is ahead of or behind the store for it)."""
    if kind == "dir":
        node = t.inode(ino)
        p = t.path_of(ino) if node is not None and node.is_dir else None
        return [] if p is None else [p]
    out: list[bytes] = []
    for parent, name in links_of(t.entry_meta(ino)):
        p = entry_path(t, parent, name) if t.lookup(parent, name) == ino else None
        if p is not None:
            out.append(p)
    return out


def finder_for(libdir: str, limit: int = 50):
    """``finder(txn, term) -> Found`` for the mount's ``/.find/``: :func:`find_ranked` over the library's
    term index (:func:`libraryfs.layout.term_index_path`), read-only, one connection per thread.

    Listing ``/.find/TERM/`` makes the kernel look up each of its links, and each lookup asks the finder
    again: answers are cached per term while the TOC generation and the index file (size and mtime of the
    file and its WAL) are unchanged, so one listing costs one search (at most 256 terms kept)."""
    from libraryfs.layout import term_index_path

    path = term_index_path(libdir)
    reader = termindex.Reader(path)
    cache: dict[bytes, tuple[tuple, Found]] = {}
    lock = threading.Lock()

    def finder(t: Txn, term: bytes) -> Found:
        """The ranked matches for ``term`` (:func:`find_ranked`), cached per term while the TOC generation and
        the index file are unchanged; falls back to the store when the index is damaged
        (``sqlite3.Error``)."""
        state = (t.cfg(S.CFG_TOC_GEN), _file_state(path), _file_state(path + "-wal"))
        with lock:
            hit = cache.get(term)
        if hit is not None and hit[0] == state:
            return hit[1]
        found = find_ranked(t, reader.get(), term, limit)
        with lock:
            if len(cache) >= 256:
                cache.clear()
            cache[term] = (state, found)
        return found

    return finder


def _file_state(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns
