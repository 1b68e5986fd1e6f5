"""Deterministic finder: resolve a name whose section is unknown, without the model (ARCHITECTURE §2).

Order of results: (1) exact name matches (case-insensitive, via the ``names`` table the indexer keeps: one
range scan, :meth:`~libraryfs.fs.store.Txn.iter_names`), shortest path first; (2) entries whose name contains the term; (3) entries whose TOC
summary line contains every word of the term, ranked by how many times the words occur. Paths are absolute
bytes inside the library. Used by ``libraryfs find`` and ``/.find/<term>/``.
"""

from __future__ import annotations

import os

from libraryfs.fs import schema as S
from libraryfs.fs.store import Txn


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
        name, parent = os.fsencode(m.name), m.parent
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
