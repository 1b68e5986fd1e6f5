"""The term index behind ``libraryfs find`` and ``/.find/``: SQLite FTS5 over entries and directories.

Derived data in one SQLite file the library layout owns (:func:`libraryfs.layout.term_index_path`),
rebuildable from the store at any time. Why SQLite FTS5: it is in the standard library (``sqlite3``; no new
dependency, no native build), it ranks with Okapi BM25 with per-column weights (``bm25()``, sqlite.org/fts5
§5.1.1), it updates one row at a time (the indexer's passes are incremental) and its WAL mode lets the mount
read while the indexer writes. Tables:

* ``rows(ino, kind, name, hash)``: one row per indexed inode (``kind`` ``"entry"`` or ``"dir"``; ``name``:
  its file name, or each name of a hard-linked file on its own line); ``hash`` is
  the state the row was built from (an entry's content hash and outline version, a directory's digest of its
  section record) — the reconcile pass compares it with the store to find drift;
* ``terms``: the FTS5 table, rowid = inode, columns ``name`` (as in ``rows``), ``defines`` (the
  names it defines, :attr:`~libraryfs.fs.schema.EntryMeta.defines`) and ``body`` (its decoded text, at most
  :data:`BODY_CHARS` characters; a directory's description and profile terms);
* ``defs(key, ino, exact)``: every defined name, case-folded, and each of its dotted suffixes
  (``json.JSONDecoder.decode`` → ``jsondecoder.decode``, ``decode``; ``exact`` 0) — the known-name lookup.

Ranking (:func:`search`): defined names first (the whole qualified name, then a dotted suffix), then BM25
over all query tokens (weights name 10, defines 5, body 1); only while nothing matched, the tokens as
prefixes (``caf`` → ``café``), then any token. Consistency: the
indexer commits the store first and this file second; a crash between the two leaves drift that
:func:`reconcile` (run at the indexer's first pass) finds by comparing ``rows.hash`` with the store, and
:func:`verify` reports (``libraryfs check``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from libraryfs.fs import schema as S
from libraryfs.fs.exclude import Chain, TocExclusion
from libraryfs.fs.store import Store, Txn

log = logging.getLogger("libraryfs.indexer")

INDEX_VERSION = 1  #: bump when the tables or what they hold change (the file is then rebuilt)
BODY_CHARS = 200_000  #: characters of an entry's text indexed
WEIGHTS = (10.0, 5.0, 1.0)  #: bm25 column weights: name, defines, body
_TOKEN = re.compile(r"[\w]+", re.UNICODE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info(k TEXT PRIMARY KEY, v TEXT);
CREATE TABLE IF NOT EXISTS rows(ino INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT, hash TEXT);
CREATE TABLE IF NOT EXISTS defs(key TEXT NOT NULL, ino INTEGER NOT NULL, exact INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS defs_key ON defs(key);
CREATE INDEX IF NOT EXISTS defs_ino ON defs(ino);
CREATE VIRTUAL TABLE IF NOT EXISTS terms USING fts5(name, defines, body, tokenize="unicode61 tokenchars '_'");
"""


@dataclass
class Row:
    """What one inode contributes to the index (``kind`` ``"entry"`` or ``"dir"``)."""

    ino: int
    kind: str
    name: str
    hash: str
    defines: list[str] = field(default_factory=list)
    body: str = ""


@dataclass
class Hit:
    """One result: inode, kind, how it matched (``"defines"``, ``"suffix"``, ``"all"``, ``"any"``) and its
    bm25 score (lower is better; 0 for a defined-name match)."""

    ino: int
    kind: str
    match: str
    score: float = 0.0


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open the index at ``path`` (WAL mode). Read-write creates it (and the tables); read-only needs it
    to exist (``sqlite3.OperationalError`` otherwise). A file of an older :data:`INDEX_VERSION` is
    emptied on a read-write open (derived data: :func:`reconcile` rebuilds it)."""
    if readonly:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=5.0)
        return db
    if not os.path.exists(path):
        _create_whole(path)
    db = sqlite3.connect(path, check_same_thread=False, timeout=30.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(_SCHEMA)
    v = db.execute("SELECT v FROM info WHERE k='version'").fetchone()
    if v is None or v[0] != str(INDEX_VERSION):
        with db:
            for table in ("rows", "defs", "terms"):
                db.execute(f"DELETE FROM {table}")
            db.execute("INSERT OR REPLACE INTO info VALUES('version', ?)", (str(INDEX_VERSION),))
    return db


def _create_whole(path: str) -> None:
    """Create an empty index at ``path`` with its tables in place: built under a temporary name, then
    renamed, so a reader (``libraryfs check`` beside a running indexer) never opens a file without them.
    Raises ``sqlite3.Error`` (``database or disk is full`` on a full disk) or OSError; the temporary file is
    removed then, so failed attempts leave nothing in the library directory."""
    tmp = f"{path}.new-{os.getpid()}"
    try:
        fresh = sqlite3.connect(tmp)
        try:
            fresh.executescript(_SCHEMA)
            with fresh:
                fresh.execute("INSERT OR REPLACE INTO info VALUES('version', ?)", (str(INDEX_VERSION),))
        finally:
            fresh.close()
        os.replace(tmp, path)
    except BaseException:
        for suffix in ("", "-journal", "-wal", "-shm"):
            try:
                os.unlink(tmp + suffix)
            except OSError:  # absent, or the directory cannot be written: the first error is the one to raise
                pass
        raise


def recreate(path: str, db: sqlite3.Connection | None = None) -> sqlite3.Connection:
    """Delete the index at ``path`` (and its ``-wal``/``-shm``; closing ``db`` first) and create it empty:
    the repair of a file SQLite cannot read. Derived data: :func:`reconcile` fills it again."""
    if db is not None:
        db.close()
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass
    return connect(path)


def _text(s: str) -> str:
    """``s`` as SQLite can store it: undecodable bytes (surrogate escapes of a file name) become U+FFFD."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# -- rows from the store -------------------------------------------------------------------------------------
def _dir_hash(name: str, m: S.SectionMeta | None) -> str:
    parts = [name, (m.description or "") if m else "", *sorted((m.profile or {}) if m else {})]
    parts += list((m.names or []) if m else [])
    return "dir:" + hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]


class Scope:
    """Which inodes the index may hold, by the TOCs' rule (:meth:`TocExclusion.entry_excluded`): nothing of
    an excluded directory (a dot-directory, an ignored path) or of an entry an ignore file matches, so a
    path hidden with a ``.gitignore`` is not found either. ``exclusion`` (the indexer's, whose ignore-file
    cache it shares) or a new one; :meth:`read` starts the chains' memo afresh for one read transaction."""

    def __init__(self, exclusion: TocExclusion | None = None) -> None:
        self.exclusion = exclusion or TocExclusion()
        self.memo: dict[int, Chain | None] = {}

    def read(self) -> Scope:
        """Forget the directory chains of an earlier read transaction (the tree may have changed); self."""
        self.memo = {}
        return self

    def dir_excluded(self, t: Txn, ino: int) -> bool:
        """Whether directory ``ino`` is excluded (False when detached: it has no path to match)."""
        ch = self.exclusion.chain(t, ino, self.memo)
        return ch is not None and ch.place.excluded

    def entry_excluded(self, t: Txn, parent: int, name: bytes) -> bool:
        """Whether file or symlink ``name`` of directory ``parent`` is excluded."""
        return self.exclusion.entry_excluded(t, parent, name, False, self.memo)


def wanted(t: Txn, ino: int, scope: Scope | None = None) -> tuple[str, str, str] | None:
    """``(kind, name, hash)`` the index should hold for ``ino`` now, or None when it should hold nothing
    (a missing inode, the root, an entry the indexer has not examined yet, a symlink, and — by ``scope``'s
    rule, a new :class:`Scope` when None — an excluded directory or entry). Raises
    :class:`~libraryfs.errors.Corrupt` on a ``dirparent`` cycle."""
    scope = scope or Scope()
    node = t.inode(ino)
    if node is None or ino == S.ROOT_INO:
        return None
    if node.is_dir:
        link = t.dirparent(ino)
        if link is None or scope.dir_excluded(t, ino):
            return None
        name = _text(os.fsdecode(link[1]))
        return "dir", name, _dir_hash(name, t.section_meta(ino))
    from libraryfs.index.outline import OUTLINE_VERSION  # lazy: the outline's parsers are not find's cost

    m = t.entry_meta(ino)
    if m is None or not m.hash or m.link or not m.parent:
        return None
    raw = os.fsencode(m.name)
    if t.lookup(m.parent, raw) != ino or scope.entry_excluded(t, m.parent, raw):
        return None
    return "entry", _entry_name(m), f"{m.hash}|{m.outline}|{OUTLINE_VERSION}"


def _entry_name(m: S.EntryMeta) -> str:
    """The ``name`` column of an entry: its file name, or every name of a hard-linked file (one per line, in
    the order of :attr:`~libraryfs.fs.meta.EntryMeta.links`), so that each is matched."""
    if not m.links:
        return _text(m.name)
    return "\n".join(dict.fromkeys(_text(n) for _p, n in m.links))


def build_row(t: Txn, ino: int, want: tuple[str, str, str]) -> Row:
    """The row of ``ino`` (``want`` from :func:`wanted`): reads the entry's content (first
    :data:`BODY_CHARS` characters, decoded as the outline does) or the directory's section record."""
    from libraryfs.index.outline import decode_text  # lazy, like wanted()'s

    kind, name, h = want
    if kind == "dir":
        sm = t.section_meta(ino)
        body = " ".join([(sm.description or "") if sm else "", *sorted((sm.profile or {}) if sm else {})])
        return Row(ino, kind, name, h, list((sm.names or []) if sm else []), body)
    m = t.entry_meta(ino)
    node = t.inode(ino)
    assert m is not None and node is not None
    body = ""
    if not m.hash.startswith("big:"):  # type: ignore[union-attr]
        data = t.read_data(ino, 0, min(node.size, BODY_CHARS * 2), node.size)
        decoded = decode_text(data)
        body = decoded[0][:BODY_CHARS] if decoded else ""
    return Row(ino, kind, name, h, list(m.defines or []), body)


def _suffixes(name: str) -> list[str]:
    parts = name.casefold().split(".")
    return [".".join(parts[k:]) for k in range(1, len(parts)) if parts[k]]


def _write(db: sqlite3.Connection, rows: Iterable[Row], dead: Iterable[int]) -> int:
    """Replace ``rows`` and delete ``dead`` inodes in one SQLite transaction; returns rows written."""
    n = 0
    with db:
        for ino in dead:
            db.execute("DELETE FROM rows WHERE ino=?", (ino,))
            db.execute("DELETE FROM terms WHERE rowid=?", (ino,))
            db.execute("DELETE FROM defs WHERE ino=?", (ino,))
        for r in rows:
            db.execute("DELETE FROM terms WHERE rowid=?", (r.ino,))
            db.execute("DELETE FROM defs WHERE ino=?", (r.ino,))
            db.execute("INSERT OR REPLACE INTO rows VALUES(?,?,?,?)", (r.ino, r.kind, r.name, r.hash))
            db.execute(
                "INSERT INTO terms(rowid, name, defines, body) VALUES(?,?,?,?)",
                (r.ino, r.name, _text(" ".join(r.defines)), _text(r.body)),
            )
            keys: dict[str, int] = {}
            for d in r.defines:
                keys[_text(d).casefold()] = 1
                for s in _suffixes(d):
                    keys.setdefault(_text(s), 0)
            db.executemany("INSERT INTO defs VALUES(?,?,?)", [(k, r.ino, e) for k, e in keys.items()])
            n += 1
    return n


def sync(store: Store, db: sqlite3.Connection, inos: Iterable[int], scope: Scope | None = None) -> int:
    """Bring the rows of ``inos`` in line with the store (one LMDB read, one SQLite transaction): rebuild
    those whose ``hash`` or name differs, delete those that should hold nothing (:func:`wanted`, by
    ``scope``'s rule). Returns rows changed."""
    inos = list(dict.fromkeys(inos))
    if not inos:
        return 0
    have = _have(db, inos)
    rows: list[Row] = []
    dead: list[int] = []
    scope = (scope or Scope()).read()
    with store.read() as t:
        for ino in inos:
            want = wanted(t, ino, scope)
            if want is None:
                if ino in have:
                    dead.append(ino)
            elif have.get(ino) != want:
                rows.append(build_row(t, ino, want))
    return _write(db, rows, dead) + len(dead)


def _have(db: sqlite3.Connection, inos: list[int] | None = None) -> dict[int, tuple[str, str, str]]:
    if inos is None:
        cur = db.execute("SELECT ino, kind, name, hash FROM rows")
        return {r[0]: (r[1], r[2], r[3]) for r in cur}
    out: dict[int, tuple[str, str, str]] = {}
    for k in range(0, len(inos), 500):
        chunk = inos[k : k + 500]
        marks = ",".join("?" * len(chunk))
        q = f"SELECT ino, kind, name, hash FROM rows WHERE ino IN ({marks})"
        out.update({r[0]: (r[1], r[2], r[3]) for r in db.execute(q, chunk)})
    return out


@dataclass
class Drift:
    """Differences between the index and the store: rows the index lacks, rows built from another state
    (stale), rows of inodes that should hold nothing (orphan), and among those the rows of inodes the TOCs'
    rule excludes (``excluded``: a directory or entry hidden by a dot-name or an ignore file, which ``find``
    must not show). Lists of inodes; ``orphan`` and ``excluded`` never share one."""

    missing: list[int] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    orphan: list[int] = field(default_factory=list)
    excluded: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Rows out of line."""
        return len(self.missing) + len(self.stale) + len(self.orphan) + len(self.excluded)


def _excluded(t: Txn, ino: int, scope: Scope) -> bool:
    """Whether live inode ``ino`` is a directory or an examined entry that ``scope``'s rule excludes."""
    node = t.inode(ino)
    if node is None:
        return False
    if node.is_dir:
        return scope.dir_excluded(t, ino)
    m = t.entry_meta(ino)
    return m is not None and bool(m.parent) and scope.entry_excluded(t, m.parent, os.fsencode(m.name))


def drift(store: Store, db: sqlite3.Connection, scope: Scope | None = None) -> Drift:
    """Compare every row with the store (one LMDB read over all inodes, one scan of ``rows``); what the
    index may hold is :func:`wanted` by ``scope``'s rule (a new :class:`Scope` when None)."""
    have = _have(db)
    out = Drift()
    scope = (scope or Scope()).read()
    with store.read() as t:
        for k, _v in t.kv.range(S.DB_INODES, keys_only=True):
            ino = S.from_u64(k)
            want = wanted(t, ino, scope)
            got = have.pop(ino, None)
            if want is None:
                if got is not None:
                    (out.excluded if _excluded(t, ino, scope) else out.orphan).append(ino)
            elif got is None:
                out.missing.append(ino)
            elif got != want:
                out.stale.append(ino)
    out.orphan.extend(sorted(have))
    return out


def reconcile(store: Store, db: sqlite3.Connection, scope: Scope | None = None) -> Drift:
    """Find and fix every drifted row (:func:`drift`, then :func:`sync` of those inodes, by ``scope``'s
    rule) and clear the :func:`mark_behind` note; returns what it found. Run by the indexer at its first pass
    (a kill -9 between its two commits, or a predecessor stopped mid-pass) and by ``libraryfs check
    --repair``."""
    d = drift(store, db, scope)
    if d.total:
        sync(store, db, d.missing + d.stale + d.orphan + d.excluded, scope)
    if behind(db):
        with db:
            db.execute("DELETE FROM info WHERE k=?", (_BEHIND,))
    return d


_BEHIND = "behind"  #: ``info`` key: the rows may trail the store until the next indexer's first pass


def mark_behind(db: sqlite3.Connection) -> None:
    """Note that the rows may trail the store: an indexer stopped (SIGTERM, ``libraryfs umount``) after
    committing meta or TOCs whose rows it did not write. Its successor's first pass reconciles every row
    (:func:`upkeep`) and clears the note (:func:`reconcile`); until then ``check`` does not count that
    drift as a problem (:func:`verify`), as while an indexer runs. A kill -9 leaves no note: ``check``
    then reports the drift (T2). Raises ``sqlite3.Error`` (a full disk)."""
    with db:
        db.execute("INSERT OR REPLACE INTO info VALUES(?, '1')", (_BEHIND,))


def behind(db: sqlite3.Connection) -> bool:
    """Whether the index carries the :func:`mark_behind` note."""
    return db.execute("SELECT 1 FROM info WHERE k=?", (_BEHIND,)).fetchone() is not None


def upkeep(
    store: Store,
    path: str,
    db: sqlite3.Connection | None,
    touched: Iterable[int],
    full: bool,
    scope: Scope | None = None,
) -> tuple[sqlite3.Connection, int]:
    """The indexer's step after each pass: :func:`sync` the ``touched`` inodes; when ``db`` is None (this
    process's first pass) open the file, replace it if SQLite cannot read it (:func:`integrity`), and
    :func:`reconcile` every row, as a ``full`` pass also does. ``scope``: what the index may hold (the
    indexer passes its own, sharing its ignore-file cache). Returns the connection and the rows found out of
    line (0 after a plain sync)."""
    if db is None:
        opened: sqlite3.Connection | None = None
        try:
            opened = connect(path)
            bad = integrity(opened)
        except sqlite3.DatabaseError as e:
            bad = str(e)
        if bad or opened is None:
            log.warning("term index %s is damaged (%s): rebuilding it", path, bad)
            opened = recreate(path, opened)
        db, full = opened, True
    if full:
        return db, reconcile(store, db, scope).total
    sync(store, db, touched, scope)
    return db, 0


def integrity(db: sqlite3.Connection) -> str | None:
    """None when SQLite's own checks pass (``PRAGMA quick_check`` and the FTS5 ``integrity-check``
    command), else the first error message. Leaves no transaction open: the FTS5 command is an INSERT, which
    begins one implicitly, and an open one would hold the write lock (another indexer, or ``check
    --repair``, then meets "database is locked")."""
    try:
        r = db.execute("PRAGMA quick_check").fetchone()
        if not r or r[0] != "ok":
            return f"quick_check: {r[0] if r else '?'}"
        db.execute("INSERT INTO terms(terms, rank) VALUES('integrity-check', 1)")
        n_rows = db.execute("SELECT count(*) FROM rows").fetchone()[0]
        n_terms = db.execute("SELECT count(*) FROM terms").fetchone()[0]
        if n_rows != n_terms:
            return f"{n_rows} rows but {n_terms} FTS rows"
    except sqlite3.DatabaseError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if db.in_transaction:
            db.rollback()  # the check writes nothing
    return None


# -- queries ------------------------------------------------------------------------------------------------
def tokens(term: str) -> list[str]:
    """The query tokens :func:`search` matches ``term`` by: runs of word characters, case-folded
    (``"Zebra count"`` → ``["zebra", "count"]``; ``"json.dumps"`` → ``["json", "dumps"]``)."""
    return _TOKEN.findall(_text(term.strip()).casefold())


def _match(tokens: list[str], op: str, star: str = "") -> str:
    return f" {op} ".join('"' + tok.replace('"', '""') + '"' + star for tok in tokens)


def search(db: sqlite3.Connection, term: str, limit: int = 50) -> tuple[list[Hit], int]:
    """Ranked hits for ``term`` (at most ``limit``) and how many inodes match in all (see module
    docstring for the order). Tokens are runs of word characters; an empty term matches nothing."""
    key = _text(term.strip()).casefold()
    hits: dict[int, Hit] = {}
    for ino, exact in db.execute(
        "SELECT d.ino, max(d.exact) FROM defs d WHERE d.key=? GROUP BY d.ino", (key,)
    ).fetchall():
        hits[ino] = Hit(ino, "", "defines" if exact else "suffix")
    # a defined name belongs to the entry that defines it, before the sections that list it; among
    # entries, the one defining fewer names is the more specific page
    kinds = _kinds(db, list(hits))
    ordered = sorted(
        hits.values(),
        key=lambda h: (h.match != "defines", kinds.get(h.ino) == "dir", _n_defs(db, h.ino), h.ino),
    )
    toks = tokens(term)
    ranked = list(ordered)
    broadest = ""
    if toks:
        seen = set(hits)
        for op, how, star in (("AND", "all", ""), ("AND", "prefix", "*"), ("OR", "any", "")):
            if how != "all" and (ranked or (op == "OR" and len(toks) == 1)):
                break  # relax (token prefixes, then any token) only while nothing matched
            broadest = _match(toks, op, star)
            cur = db.execute(
                "SELECT rowid, bm25(terms, ?, ?, ?) AS s FROM terms WHERE terms MATCH ? ORDER BY s LIMIT ?",
                (*WEIGHTS, broadest, limit + len(seen)),
            )
            for ino, s in cur:
                if ino not in seen:
                    seen.add(ino)
                    ranked.append(Hit(ino, "", how, float(s)))
    kinds = _kinds(db, [h.ino for h in ranked[:limit]])
    for h in ranked:
        h.kind = kinds.get(h.ino, "entry")
    total = len(ranked)
    if broadest:
        union = "SELECT count(*) FROM (SELECT ino FROM defs WHERE key=? UNION SELECT rowid FROM terms WHERE terms MATCH ?)"
        total = max(total, db.execute(union, (key, broadest)).fetchone()[0])
    return ranked[:limit], total


def _n_defs(db: sqlite3.Connection, ino: int) -> int:
    """Names an inode defines (ties among defined-name matches go to the more specific page)."""
    return db.execute("SELECT count(*) FROM defs WHERE ino=? AND exact=1", (ino,)).fetchone()[0]


def _kinds(db: sqlite3.Connection, inos: list[int]) -> dict[int, str]:
    return {ino: kind for ino, (kind, _n, _h) in _have(db, inos).items()}


class Reader:
    """Read-only connections to a term index, one per thread (the mount's FUSE threads), opened lazily:
    :meth:`get` returns None while the file does not exist or cannot be read (the finder then falls back
    to the store's ``names`` table and summaries)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()

    def get(self) -> sqlite3.Connection | None:
        """This thread's connection, or None."""
        db = getattr(self._local, "db", None)
        if db is not None:
            return db
        if not os.path.exists(self.path):
            return None
        try:
            db = connect(self.path, readonly=True)
            db.execute("SELECT v FROM info WHERE k='version'").fetchone()
        except sqlite3.Error:
            return None
        self._local.db = db
        return db


# -- libraryfs check ----------------------------------------------------------------------------------------
def known_inodes(path: str) -> list[int]:
    """The inode numbers the term index at ``path`` holds rows for (files and directories the store had when
    it was last synced), read-only; ``[]`` when the file is missing or SQLite cannot read it. ``check
    --repair`` reads them before a salvage to say how many entries the salvage lost."""
    if not os.path.exists(path):
        return []
    try:
        db = connect(path, readonly=True)
        try:
            return [r[0] for r in db.execute("SELECT ino FROM rows")]
        finally:
            db.close()
    except sqlite3.Error:
        return []


@dataclass
class Finding:
    """One problem of the term index for ``libraryfs check``: ``code`` ``T1`` (missing, unreadable or
    damaged file), ``T2`` (rows out of line with the store) or ``T3`` (rows of excluded paths: what an
    ignore file hides would still be found), a message, and whether it was repaired."""

    code: str
    message: str
    repaired: bool = False


def verify(store: Store, path: str, repair: bool = False, drift_too: bool = True) -> list[Finding]:
    """Check the term index at ``path`` against the store: SQLite's and FTS5's integrity checks pass (:func:`integrity`), and — with ``drift_too``, which
    the caller clears while an indexer runs (its rows trail the store by one pass) — no row is missing,
    stale or orphaned (T2) and none is of an excluded path (T3: :func:`drift`, by the TOCs' rule) unless the index is noted as trailing the store (:func:`mark_behind`). A missing file is no problem (a library of an earlier release:
    the indexer's next start builds it); ``repair`` builds it (T1, repaired). A plain check never changes the file's content; ``repair``
    recreates a damaged file and reconciles (the caller holds the indexer's lock)."""
    with store.read() as t:
        indexed = t.cfg(S.CFG_TOC_GEN) is not None
    if not os.path.exists(path):
        if not indexed or not repair:  # derived data: the indexer's next start builds it
            return []
        f = Finding("T1", f"term index {path} is missing")
        if repair:

            def build() -> None:
                """Create the missing file and fill it from the store."""
                fresh = connect(path)
                try:
                    reconcile(store, fresh)
                finally:
                    fresh.close()

            _repair([f], build)
        return [f]
    db: sqlite3.Connection | None = None
    try:
        db = sqlite3.connect(path, timeout=30.0)  # read-write: the FTS5 integrity-check is a command
    except sqlite3.Error as e:
        bad: str | None = f"cannot open: {e}"
    else:
        bad = integrity(db)
    if bad:
        f = Finding("T1", f"term index {path} is damaged: {bad}")
        if repair:

            def rebuild() -> None:
                """Recreate the damaged file and fill it from the store."""
                nonlocal db
                db = recreate(path, db)
                reconcile(store, db)

            _repair([f], rebuild)
        if db is not None:
            db.close()
        return [f]
    assert db is not None
    try:
        if not drift_too or behind(db):  # the next indexer's first pass reconciles it (mark_behind)
            return []
        d = drift(store, db)
        if not d.total:
            return []
        found: list[Finding] = []
        if d.excluded:
            first = sorted(d.excluded)[:8]
            found.append(
                Finding(
                    "T3",
                    f"term index holds {len(d.excluded)} rows of excluded paths (an ignore file or a dot-name "
                    f"hides them; find still shows them) (inodes {', '.join(map(str, first))}"
                    f"{' …' if len(d.excluded) > len(first) else ''})",
                )
            )
        rest = sorted(d.missing + d.stale + d.orphan)
        if rest:
            first = rest[:8]
            found.append(
                Finding(
                    "T2",
                    f"term index out of line with the store: {len(d.missing)} missing, {len(d.stale)} stale, "
                    f"{len(d.orphan)} orphaned rows (inodes {', '.join(map(str, first))}"
                    f"{' …' if len(rest) > len(first) else ''})",
                )
            )
        if repair:

            def fix() -> None:
                """Reopen the file read-write and bring every row in line with the store."""
                nonlocal db
                if db is not None:
                    db.close()
                db = connect(path)
                reconcile(store, db)

            _repair(found, fix)
        return found
    finally:
        if db is not None:
            db.close()


def _repair(findings: list[Finding], fn: Callable[[], None]) -> None:
    """Run the repair ``fn`` of ``findings``: each is then repaired, or — when SQLite cannot write (a full
    disk: ``database or disk is full``, a read-only file) — says why it was not (``check --repair`` printed a
    traceback), and the check's exit status says it is not repaired."""
    try:
        fn()
    except sqlite3.Error as e:
        for f in findings:
            f.message += f"; not repaired: {e} (free space, then run `libraryfs check --repair` again)"
        return
    for f in findings:
        f.repaired = True
