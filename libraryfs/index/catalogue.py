"""The name catalogue: every name an entry defines → that entry, as a B+tree of bounded pages (issue 13).

A known name (``json.dumps``, ``Choice.normalize_choice``, a glossary term) is often defined in an entry
whose file name says nothing of it, deep below sections whose lines can list only a few names. The
catalogue applies the Library Theorem's design (PAPERS.md §1) to names: the names sorted A–Z in pages of at
most C tokens, index pages of ``first … last`` ranges above them, linked from the master ``INDEX.md``. A
known-name lookup then costs ⌈log_b N_names⌉ catalogue pages + 1 entry read at any size.

It is served at ``/.catalogue/INDEX.md`` and ``/.catalogue/.index/NNNN.md``: the rendered pages are the
``toc`` pages of the pseudo directory :data:`~libraryfs.fs.schema.CATALOGUE_INO`. Its data lives in the
``catalogue`` extension table (layout in :mod:`libraryfs.fs.schema`): one row per (name, entry), one node
record per page (a leaf covers the rows of a key range ``[lo, hi)``; an inner node lists its children with
their ranges and counts), one owner row per (entry, name) (the rows of an entry, found by its inode once its
meta record is gone), the set of leaves to re-render, and a small state record.

Cost of a write (bounded, amortised): :func:`record` updates the rows of the entry that changed and marks
the leaves that hold them (one root-to-leaf descent per name); :func:`refresh` re-renders only those
leaves and their ancestors, splitting a page that outgrows C (new pages are appended, so page numbers stay
contiguous). Deletions leave short or empty leaves in place; when a quarter of the leaves are empty, or a
directory was renamed (every path below it moved), the catalogue is rebuilt in one bulk pass — O(names),
amortised over the Θ(names / b) changes that made it necessary. Everything here is derived data: dropping
the table and the pages rebuilds it.

Pages are a function of the name set once the indexer is idle. Incremental splits cut a leaf where it
overflowed, so the page ranges of the same names depend on how they arrived (one pass, or passes cut by a
mount's timing: python3-doc's names gave a TOC-only walk 69% in one run and 80% in another, issue 13). So
the state record says when incremental changes were made since the last bulk plan (``unsettled``), and the
catalogue is re-planned in bulk (a) when splits since it added :data:`SPLIT_SHARE` of the leaves, and (b)
when the indexer is idle after changes (:class:`Settle`: at most once per :data:`SETTLE_COST_FACTOR` times
the last re-plan's duration, so re-plans take at most 1/(1 + factor) of the indexer's time, never one per
write). A bulk plan depends only on the rows: the same names give byte-identical pages.
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_right
from collections.abc import Callable

from libraryfs.fs import schema as S
from libraryfs.fs.meta import EntryMeta, SectionMeta
from libraryfs.fs.store import Store, Txn
from libraryfs.index import catpages as P

TABLE = S.DB_CATALOGUE
ROW, NODE, DIRTY, STATE, OWNER = b"n", b"p", b"d", b"s", b"i"
NAME_MAX_BYTES = 200  #: longer names are cut (a catalogue line must stay short)
REBUILD_EMPTY_SHARE = 0.25  #: rebuild once this share of the leaves is empty
SPLIT_SHARE = (
    0.5  #: re-plan in bulk once incremental splits since the last bulk plan added this share of leaves
)
SETTLE_COST_FACTOR = 20.0  #: an idle re-plan waits this many times the last one's duration after it


def row_key(name: str, ino: int) -> bytes:
    """Row key of ``name`` defined by entry ``ino``: its sort key (:func:`~.catpages.sort_key`) first, so
    rows sort A–Z as an index does (``_private`` under P, ``--verbose`` under V)."""
    name = name.replace("\0", "")
    nb = name.encode("utf-8", "surrogateescape")[:NAME_MAX_BYTES]
    sk = P.sort_key(name).encode("utf-8", "surrogateescape")[:NAME_MAX_BYTES]
    return ROW + sk + b"\0" + nb + b"\0" + S.u64(ino)


def parse_row(key: bytes) -> tuple[str, int]:
    """``(name, ino)`` of a row key."""
    body = key[len(ROW) : -8]
    name = body.split(b"\0", 1)[1][:-1] if b"\0" in body else body
    return name.decode("utf-8", "surrogateescape"), S.from_u64(key[-8:])


def _owner_key(ino: int, row: bytes) -> bytes:
    return OWNER + S.u64(ino) + row


def _node_key(page: int) -> bytes:
    return NODE + page.to_bytes(4, "big")


def _dirty_key(page: int) -> bytes:
    return DIRTY + page.to_bytes(4, "big")


def load_node(t: Txn, page: int) -> dict | None:
    """The node record of catalogue page ``page`` (None: no such page)."""
    raw = t.kv.get(TABLE, _node_key(page))
    return json.loads(raw) if raw is not None else None


def state(t: Txn) -> dict | None:
    """The catalogue's state record (None: never built)."""
    raw = t.kv.get(TABLE, STATE)
    return json.loads(raw) if raw is not None else None


def leaf_of(t: Txn, key: bytes) -> int:
    """The leaf page whose range holds row key ``key`` (one descent from the root)."""
    page = 0
    node = load_node(t, 0)
    while node is not None and node["k"] == "inner":
        kids = node["kids"]
        los = [bytes.fromhex(k[1]) for k in kids]
        page = kids[max(0, bisect_right(los, key) - 1)][0]
        node = load_node(t, page)
    return page


def record(t: Txn, ino: int, old: EntryMeta | None, new: EntryMeta | None) -> None:
    """Keep the rows of entry ``ino`` in step with its meta record (``new`` None: the entry is gone).

    Rows of names it no longer defines are removed, new ones added, and when the entry moved (its name or
    directory changed) its rows stay but their leaves are marked for re-rendering (the links changed).
    Called inside the indexer's write transaction that stores the meta record.
    """
    before = set(old.defines or []) if old is not None and old.defines else set()
    after = set(new.defines or []) if new is not None and new.defines else set()
    moved = old is not None and new is not None and (old.name, old.parent) != (new.name, new.parent)
    count = len(new.defines or []) if new is not None else 0
    respec = old is not None and new is not None and len(old.defines or []) != count
    touched: list[bytes] = []
    for name in before - after:
        k = row_key(name, ino)
        t.kv.delete(TABLE, k)
        t.kv.delete(TABLE, _owner_key(ino, k))
        touched.append(k)
    for name in after - before:
        k = row_key(name, ino)
        t.kv.put(TABLE, k, count.to_bytes(4, "big"))
        t.kv.put(TABLE, _owner_key(ino, k), b"")
        touched.append(k)
    if moved or respec:
        for name in after & before:
            k = row_key(name, ino)
            if respec:
                t.kv.put(TABLE, k, count.to_bytes(4, "big"))
            touched.append(k)
    _mark(t, touched)


def forget(t: Txn, ino: int) -> None:
    """Remove every row of entry ``ino`` (deleted: its meta record went with its inode) and mark their
    leaves for re-rendering. Called inside the indexer's write transaction that sees the entry gone."""
    prefix = OWNER + S.u64(ino)
    touched = [k[len(prefix) :] for k, _ in t.kv.prefix(TABLE, prefix, keys_only=True)]
    for k in touched:
        t.kv.delete(TABLE, k)
        t.kv.delete(TABLE, prefix + k)
    _mark(t, touched)


def _mark(t: Txn, touched: list[bytes]) -> None:
    """Mark the leaves holding row keys ``touched`` for re-rendering (once the catalogue is built)."""
    if touched and t.kv.get(TABLE, STATE) is not None:
        for page in {leaf_of(t, k) for k in touched}:
            t.kv.put(TABLE, _dirty_key(page), b"")


def mark_rebuild(t: Txn) -> None:
    """Ask the next :func:`refresh` for a bulk rebuild (a directory moved: the paths of its entries did)."""
    st = state(t)
    if st is not None:
        st["rebuild"] = True
        t.kv.put(TABLE, STATE, json.dumps(st).encode())


def open_table(store: Store) -> None:
    """Create the catalogue's extension table if needed (the indexer does, at start)."""
    store.open_table(TABLE)


def unsettled(t: Txn) -> bool:
    """Whether pages were changed incrementally since the last bulk plan (their ranges then depend on the
    order the names arrived in; :func:`refresh` with ``settle`` re-plans them)."""
    st = state(t)
    return bool(st and (st.get("unsettled") or st.get("rebuild")))


class Settle:
    """When the indexer may re-plan an unsettled catalogue while idle (module docstring): not before
    ``cost_factor`` × the last re-plan's duration has passed since it ended (amortised by time: re-plans
    take at most 1 / (1 + cost_factor) of the indexer's wall time, whatever the write rate)."""

    def __init__(self, cost_factor: float = SETTLE_COST_FACTOR) -> None:
        self.cost_factor = cost_factor
        self.last_end: float | None = None  # time.monotonic() at the end of this process's last re-plan
        self.last_s = 0.0

    def allowed(self) -> bool:
        """Whether an idle re-plan may run now."""
        return self.last_end is None or time.monotonic() - self.last_end >= self.cost_factor * self.last_s

    def done(self, seconds: float) -> None:
        """A re-plan that took ``seconds`` just ended."""
        self.last_end, self.last_s = time.monotonic(), seconds


# ---- refresh ------------------------------------------------------------------------------------------
def refresh(store: Store, max_tokens: int, count_tokens: Callable[[str], int], settle: bool = False) -> int:
    """Bring the rendered catalogue up to date with its rows; returns the pages written. ``settle`` (the
    indexer is idle): re-plan in bulk if pages were changed incrementally since the last bulk plan, so the
    pages become a function of the names alone.

    Reads in one read transaction, renders outside any transaction, writes in one write transaction.
    """
    with store.read() as t:
        st = state(t)
        dirty = [int.from_bytes(k[1:], "big") for k, _ in t.kv.prefix(TABLE, DIRTY, keys_only=True)]
        again = st is not None and settle and bool(st.get("unsettled"))
        if st is None or st.get("rebuild") or st.get("max_tokens") != max_tokens or again:
            has_rows = any(True for _ in t.kv.prefix(TABLE, ROW, keys_only=True, limit=1))
            if st is None and not has_rows:
                return 0
            plan = _bulk(t, max_tokens, count_tokens)
        elif dirty:
            plan = _incremental(t, st, sorted(set(dirty)), max_tokens, count_tokens)
        else:
            return 0
    store.run_write(lambda w: _apply(w, plan))
    return len(plan.pages)


class _Plan:
    """Pages and node records to write, and what to clear (``replace``: drop every old page first);
    ``leaves``/``empty``: the leaf counts after the change (for the rebuild rule)."""

    def __init__(self, replace: bool, max_tokens: int) -> None:
        self.replace = replace
        self.max_tokens = max_tokens
        self.nodes: dict[int, dict] = {}
        self.pages: dict[int, tuple[bytes, int]] = {}  # page -> (bytes, tokens)
        self.clear_dirty: list[int] = []
        self.npages = 0
        self.leaves = 0
        self.empty = 0
        self.splits = 0  # leaves added by incremental splits since the last bulk plan


def _apply(t: Txn, plan: _Plan) -> None:
    kv = t.kv
    if plan.replace:
        kv.delete_range(TABLE, NODE, P.prefix_end(NODE))
        kv.delete_range(TABLE, DIRTY, P.prefix_end(DIRTY))
        kv.delete_range(S.DB_TOC, S.u64(S.CATALOGUE_INO), S.u64(S.CATALOGUE_INO + 1))
    else:
        for page in plan.clear_dirty:
            kv.delete(TABLE, _dirty_key(page))
    for page, node in plan.nodes.items():
        kv.put(TABLE, _node_key(page), json.dumps(node, separators=(",", ":")).encode())
    old = t.section_meta(S.CATALOGUE_INO) if not plan.replace else None
    tokens = list(old.toc_page_tokens) if old is not None else []
    tokens += [0] * (plan.npages - len(tokens))
    for page, (data, ntok) in plan.pages.items():
        kv.put(S.DB_TOC, S.toc_key(S.CATALOGUE_INO, page), data)
        tokens[page] = ntok
    root = plan.nodes.get(0) or load_node(t, 0) or {}
    t.put_meta(
        S.CATALOGUE_INO,
        SectionMeta(
            description="name catalogue",
            entries_total=int(root.get("n", 0)),
            toc_pages=plan.npages,
            toc_levels=int(root.get("depth", 1)),
            toc_max_page_tokens=max(tokens or [0]),
            toc_page_tokens=tokens[: plan.npages],
        ),
    )
    st = {"pages": plan.npages, "leaves": plan.leaves, "empty": plan.empty, "max_tokens": plan.max_tokens}
    if not plan.replace:  # changed in place: ranges now depend on the order names arrived in
        st["unsettled"], st["splits"] = True, plan.splits
    if plan.leaves and plan.empty > max(2, plan.leaves * REBUILD_EMPTY_SHARE):
        st["rebuild"] = True
    if plan.splits > max(2, plan.leaves * SPLIT_SHARE):
        st["rebuild"] = True
    kv.put(TABLE, STATE, json.dumps(st).encode())


def _lines_of(t: Txn, lo: bytes, hi: bytes | None) -> list[tuple[str, bytes, bool]]:
    """``(name, entry path, starts a name)`` for the rows in ``[lo, hi)``: one line per name, linking the
    entry that defines the fewest names (the most specific: a symbol's own file before the module)."""
    out: list[tuple[str, bytes, bool]] = []
    best: dict[str, tuple[int, int]] = {}
    order: list[str] = []
    for k, v in t.kv.range(TABLE, lo, hi):
        name, ino = parse_row(k)
        spec = int.from_bytes(v[:4], "big") if len(v) >= 4 else 1 << 30
        if name not in best:
            order.append(name)
        if name not in best or spec < best[name][0]:
            best[name] = (spec, ino)
    paths: dict[int, bytes | None] = {}  # an entry defines many names: its path is looked up once
    for name in order:
        ino = best[name][1]
        if ino not in paths:
            paths[ino] = entry_path(t, ino)
        path = paths[ino]
        if path is not None:
            out.append((name, path, True))
    return out


def entry_path(t: Txn, ino: int) -> bytes | None:
    """Absolute path of entry ``ino`` from its meta record (None: gone, or its directory is)."""
    m = t.entry_meta(ino)
    if m is None or not m.parent:
        return None
    base = t.path_of(m.parent)
    return None if base is None else base.rstrip(b"/") + b"/" + os.fsencode(m.name)


def _bulk(t: Txn, max_tokens: int, count_tokens: Callable[[str], int]) -> _Plan:
    """Every page from the rows: leaves packed to the bound at name boundaries, inner levels above."""
    plan = _Plan(True, max_tokens)
    lines = _lines_of(t, ROW, P.prefix_end(ROW))
    keys = [row_key(n, 0)[:-8] for n, _p, _s in lines]
    leaves = P.pack_leaves(lines, max_tokens, count_tokens) or [[]]
    nodes, rendered = P.render_all(leaves, keys, max_tokens, count_tokens)
    plan.nodes, plan.pages, plan.npages = nodes, rendered, len(nodes)
    plan.leaves, plan.empty = len(leaves), sum(1 for x in leaves if not x)
    return plan


def _incremental(
    t: Txn, st: dict, dirty: list[int], max_tokens: int, count_tokens: Callable[[str], int]
) -> _Plan:
    """Re-render the dirty leaves, split those that outgrew the bound, and re-render their ancestors."""
    plan = _Plan(False, max_tokens)
    plan.npages = int(st.get("pages", 1))
    plan.leaves, plan.empty = int(st.get("leaves", 1)), int(st.get("empty", 0))
    plan.splits = int(st.get("splits", 0))
    cache: dict[int, dict] = {}

    def node(page: int) -> dict:
        """Catalogue page ``page`` as a node dict: this plan's version, else the stored one, else ``{}``
        (memoised)."""
        if page not in cache:
            cache[page] = plan.nodes.get(page) or load_node(t, page) or {}
        return cache[page]

    changed_parents: set[int] = set()
    for page in dirty:
        leaf = node(page)
        plan.clear_dirty.append(page)
        if leaf.get("k") != "leaf":
            continue
        lo, hi = bytes.fromhex(leaf["lo"]), (bytes.fromhex(leaf["hi"]) if leaf.get("hi") else None)
        lines = _lines_of(t, lo, hi or P.prefix_end(ROW))
        pieces = P.pack_leaves(lines, max_tokens, count_tokens, even=True) or [[]]
        if len(pieces) > 1 and leaf.get("up", -1) < 0:  # the root is this leaf: grow a level
            return _bulk(t, max_tokens, count_tokens)
        plan.leaves += len(pieces) - 1
        plan.splits += len(pieces) - 1
        plan.empty += sum(1 for x in pieces if not x) - (1 if not leaf.get("n") else 0)
        new_pages = [page] + [plan.npages + k for k in range(len(pieces) - 1)]
        plan.npages += len(pieces) - 1
        starts = [lo] + [row_key(p[0][0], 0)[:-8] for p in pieces[1:]]
        ends: list[bytes | None] = [*starts[1:], hi]
        for k, (pg, piece) in enumerate(zip(new_pages, pieces, strict=True)):
            n = P.leaf_node(piece, starts[k], ends[k], leaf.get("up", -1))
            cache[pg] = plan.nodes[pg] = n
            plan.pages[pg] = P.render_leaf(pg, piece, n, count_tokens)
        P.replace_kid(node, plan, leaf.get("up", -1), page, new_pages, changed_parents)
    try:
        P.update_ancestors(node, plan, changed_parents, max_tokens, count_tokens)
    except P.RootSplit:
        return _bulk(t, max_tokens, count_tokens)
    return plan


def master_lines(t: Txn, prefix: str = "") -> list[str]:
    """The catalogue's line in the master ``INDEX.md`` (none when it has no names): one line labelled as an
    A–Z name index, linking the catalogue's root page (:func:`~.catpages.master_line`); ``prefix`` is put
    before the link (``../`` when the master page is ``.index/INDEX.md``)."""
    root = load_node(t, 0)
    if not root or not root.get("n"):
        return []
    return [P.master_line(root, prefix)]
