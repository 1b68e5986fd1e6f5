"""Every name of an entry: the ``names`` table behind ``find``'s exact-name matches, and the names a hard-linked
entry's meta record keeps.

A file or symlink has as many names as dirents naming it (hard links, ``ln a b``). Each is found under its
own name: ``find b`` lists ``/b`` and ``find a`` lists ``/a``, unlinking one keeps the other findable, and
renaming one moves only that name. The rule, applied alike by the indexer's incremental passes
(:mod:`libraryfs.daemon.entries`), its full pass and ``libraryfs check --repair`` (:func:`reconcile`):

* a link ``(parent, name)`` is *indexed* when its name is not hidden (:func:`~libraryfs.fs.exclude.is_hidden`)
  and the TOCs' rule does not exclude it (:meth:`~libraryfs.fs.exclude.TocExclusion.entry_excluded`);
* an entry the indexer has examined (it has an :class:`~libraryfs.fs.meta.EntryMeta`) and that has at least
  one indexed link records them all: ``name``/``parent`` is the first in ``(parent, name bytes)`` order,
  ``links`` lists every one when there are several (None for one);
* the ``names`` table holds one row per indexed link of such an entry (key
  :func:`~libraryfs.fs.schema.names_key`: the parent is part of it, so a link named alike in two
  directories is two rows).

The indexer learns the names incrementally — from its meta record (the names it knew) and the journal
records of the pass (a create, link or rename names one; an unlink or rename kills one), each checked
against the live dirent — so no pass scans the directories for the other links of an inode. The first
name (the one the catalogue, the subject index and the term index's paths use) is a function of the set,
so incremental passes and a rebuild give the same records and rows. :func:`drift` compares the whole
table and the records with the tree (one scan of the dirents): ``check`` reports it (``N1``) and
``check --repair`` fixes it. A store whose rows are of an older format (``config[names_format]`` is not
:data:`~libraryfs.fs.schema.NAMES_FORMAT`) is not judged: the indexer's next pass is a full one and
rebuilds them (``check --repair`` does too).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from libraryfs.fs import schema as S
from libraryfs.fs.exclude import Chain, TocExclusion, is_hidden
from libraryfs.fs.meta import EntryMeta
from libraryfs.fs.store import Store, Txn

Link = tuple[int, bytes]  #: ``(parent directory ino, name)``: one dirent naming an entry
#: one repair of :func:`reconcile`: ``(row key, None)`` delete, ``(row key, value)`` put, ``(None, (ino, links))``
Fix = tuple[bytes | None, bytes | tuple[int, list[Link]] | None]


def links_of(m: EntryMeta | None) -> list[Link]:
    """The names meta record ``m`` holds, in its order (``[]`` for None or a record without a parent)."""
    if m is None:
        return []
    if m.links:
        return [(int(p), os.fsencode(n)) for p, n in m.links]
    return [(m.parent, os.fsencode(m.name))] if m.parent else []


def set_links(m: EntryMeta, links: Iterable[Link]) -> None:
    """Make ``m`` record ``links`` (at least one): ``name``/``parent`` the first in ``(parent, name)`` order,
    ``links`` all of them when there are several. Raises ValueError when ``links`` is empty."""
    ordered = sorted(set(links))
    if not ordered:
        raise ValueError("an entry's meta record needs a name")
    m.parent, m.name = ordered[0][0], os.fsdecode(ordered[0][1])
    m.links = [[p, os.fsdecode(n)] for p, n in ordered] if len(ordered) > 1 else None


def indexed(t: Txn, parent: int, name: bytes, exclusion: TocExclusion, memo: dict[int, Chain | None]) -> bool:
    """Whether the link ``name`` of directory ``parent`` is one the index holds (module doc). ``memo``: the
    directory chains of one read transaction (:meth:`TocExclusion.chain`)."""
    return not is_hidden(name) and not exclusion.entry_excluded(t, parent, name, False, memo)


def write_rows(t: Txn, ino: int, old: Iterable[Link], new: Iterable[Link]) -> None:
    """Inside a write transaction: drop the ``names`` rows of ``ino``'s links in ``old`` but not in ``new``,
    and store a row for each link in ``new``."""
    keep = set(new)
    for parent, name in set(old) - keep:
        t.del_name(name, ino, parent)
    for parent, name in keep:
        t.put_name(name, ino, parent)


@dataclass
class Drift:
    """What differs between the ``names`` table and meta records and the tree (:func:`drift`): ``missing``
    rows ``{key: value}``, ``leftover`` row keys, and ``meta`` records whose names are not the entry's
    indexed links ``{ino: links}``."""

    missing: dict[bytes, bytes] = field(default_factory=dict)
    leftover: list[bytes] = field(default_factory=list)
    meta: dict[int, list[Link]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Rows and records out of line."""
        return len(self.missing) + len(self.leftover) + len(self.meta)


def expected(t: Txn, exclusion: TocExclusion | None = None) -> dict[int, list[Link]]:
    """Every examined entry with indexed links → those links in ``(parent, name)`` order: one scan of the
    dirents (a directory's children are skipped by the type byte of their dirent)."""
    exclusion = exclusion or TocExclusion()
    memo: dict[int, Chain | None] = {}
    has_meta: dict[int, bool] = {}
    out: dict[int, list[Link]] = {}
    for k, v in t.kv.range(S.DB_DIRENTS):
        kind = S.dirent_type(v)
        child = S.from_u64(v)
        if kind == S.S_IFDIR:
            continue
        if kind is None:  # a schema-1 dirent: the inode says
            node = t.inode(child)
            if node is None or node.is_dir:
                continue
        if child not in has_meta:
            has_meta[child] = t.entry_meta(child) is not None
        if not has_meta[child]:
            continue
        parent, name = S.from_u64(k), k[8:]
        if indexed(t, parent, name, exclusion, memo):
            out.setdefault(child, []).append((parent, name))
    for links in out.values():
        links.sort()
    return out


def drift(t: Txn, exclusion: TocExclusion | None = None) -> Drift:
    """Compare the ``names`` table and the entries' meta records with :func:`expected` (one scan of the
    dirents and one of the table; an entry with meta and no indexed link — unlinked while open, excluded
    since — holds no row and its record is not judged)."""
    want = expected(t, exclusion)
    out = Drift()
    rows: dict[bytes, bytes] = {}
    for ino, links in want.items():
        for parent, name in links:
            rows[S.names_key(name, ino, parent)] = S.u64(parent) + name
        m = t.entry_meta(ino)
        probe = EntryMeta()
        set_links(probe, links)
        if m is not None and (m.name, m.parent, m.links) != (probe.name, probe.parent, probe.links):
            out.meta[ino] = links
    for k, v in t.kv.range(S.DB_NAMES):
        if rows.pop(k, None) != v:
            out.leftover.append(k)
    out.missing = rows
    return out


def current(t: Txn) -> bool:
    """Whether the ``names`` rows are of this release's format (``config[names_format]``)."""
    return t.cfg(S.CFG_NAMES_FORMAT) == b"%d" % S.NAMES_FORMAT


def reconcile(store: Store, exclusion: TocExclusion | None = None, chunk: int = 0) -> Drift:
    """Bring the ``names`` table and the entries' recorded names in line with the tree (:func:`drift`) and
    mark the table current (``config[names_format]``); returns what was out of line. Run by the indexer's
    full pass and by ``check --repair`` (neither beside another indexer). A record whose names change
    marks its catalogue leaves for re-rendering (:func:`libraryfs.index.catalogue.record`); the term
    index follows at its own sync. Writes in transactions of ``chunk`` fixes (0: 256, or an eighth of an
    etcd backend's operations per transaction)."""
    from libraryfs.index import catalogue  # lazy: ``find`` reads this module, not the catalogue's pages

    with store.read() as t:
        d = drift(t, exclusion)
    limit = getattr(store.backend, "max_txn_ops", 0)
    size = chunk or (max(1, limit // 8) if limit else 256)
    fixes: list[Fix] = [
        *((k, None) for k in d.leftover),
        *d.missing.items(),
        *((None, item) for item in d.meta.items()),
    ]

    def write(t: Txn, part: list[Fix], last: bool) -> None:
        """The write transaction body of one chunk of fixes (the last also marks the format current)."""
        for key, value in part:
            if key is not None:
                if isinstance(value, bytes):
                    t.kv.put(S.DB_NAMES, key, value)
                else:
                    t.kv.delete(S.DB_NAMES, key)
                continue
            assert isinstance(value, tuple)
            ino, links = value
            old = t.entry_meta(ino)
            if old is None:
                continue
            new = replace(old, extra=dict(old.extra))
            set_links(new, links)
            catalogue.record(t, ino, old, new)
            t.put_meta(ino, new)
        if last and not current(t):
            t.put_cfg(S.CFG_NAMES_FORMAT, b"%d" % S.NAMES_FORMAT)

    k = 0
    while True:
        part = fixes[k : k + size]
        k += len(part)
        done = k >= len(fixes)

        def body(t: Txn, part: list[Fix] = part, done: bool = done) -> None:
            """One chunk's write transaction."""
            write(t, part, done)

        store.run_write(body)
        if done:
            return d


@dataclass
class Finding:
    """One problem of the ``names`` table for ``libraryfs check``: code ``N1`` (rows or recorded names out of
    line with the tree), a message, and whether it was repaired."""

    code: str
    message: str
    repaired: bool = False


def verify(store: Store, repair: bool = False, drift_too: bool = True) -> list[Finding]:
    """Check the ``names`` table and the entries' recorded names against the tree (:func:`drift`) — only
    when it can agree: ``drift_too`` (the caller clears it while an indexer runs), the indexer has committed
    a pass, no journal record waits after its cursor (the next pass adds those names) and the rows are of
    this release's format (else the next pass is a full one, which rebuilds them). ``repair`` (the caller
    holds the indexer's lock) reconciles, and also rebuilds rows of an older format (no finding: the
    indexer would have)."""
    with store.read() as t:
        settled = t.cfg(S.CFG_TOC_GEN) is not None and t.journal_tail() <= t.cfg_int(S.CFG_CURSOR)
        fmt = current(t)
        d = drift(t) if drift_too and settled and fmt else Drift()
    if not fmt and repair and settled:
        reconcile(store)
        return []
    if not d.total:
        return []
    first = sorted(set(d.meta) | {S.from_u64(k[k.index(b"\0") + 1 :]) for k in [*d.leftover, *d.missing]})[:8]
    f = Finding(
        "N1",
        f"names out of line with the tree: {len(d.missing)} missing and {len(d.leftover)} leftover `names` "
        f"rows, {len(d.meta)} entries recording other names (inodes {', '.join(map(str, first))}"
        f"{' …' if d.total > len(first) else ''})",
    )
    if repair:
        reconcile(store)
        f.repaired = True
    return [f]
