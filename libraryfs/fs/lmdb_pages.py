"""LMDB's data file read with plain ``pread(2)``: meta-page sanity, a structural walk, salvage of records.

Why: LMDB maps ``data.mdb`` and trusts it. A truncated file kills the reader with SIGBUS when it touches a
page past the end; a page overwritten with garbage trips an ``mdb_cassert`` (SIGABRT) or a wild pointer
(SIGSEGV). None of that can be caught in Python, so every open checks the file first with ordinary reads
(:func:`check_meta`, two pages), and ``mount``/``check`` walk every reachable page (:func:`walk`) before
LMDB touches them. Nothing here imports ``lmdb`` and nothing here can crash on a bad file: every offset is
bounds-checked and a short read is a finding, not a signal.

The on-disk format (LMDB 0.9, 64-bit, ``lmdb/libraries/liblmdb/mdb.c``; the py-lmdb build we ship):

* A page starts with a 16-byte header: ``mp_pgno`` u64 (its own page number), ``mp_pad`` u16, ``mp_flags``
  u16 (P_BRANCH 1, P_LEAF 2, P_OVERFLOW 4, P_META 8, P_LEAF2 0x20), then ``mp_lower``/``mp_upper`` u16 (the
  free gap) or, on an overflow page, ``mp_pages`` u32 (the run's length). Node offsets (u16 each) follow.
* Pages 0 and 1 are the meta pages: at offset 16 ``mm_magic`` u32 (0xBEEFC0DE), ``mm_version`` u32 (1),
  ``mm_address`` u64, ``mm_mapsize`` u64, two ``MDB_db`` records of 48 bytes (FREE_DBI, MAIN_DBI: ``md_pad``
  u32 — the page size for FREE_DBI —, ``md_flags`` u16, ``md_depth`` u16, branch/leaf/overflow page counts,
  ``md_entries``, ``md_root`` u64 each), ``mm_last_pg`` u64, ``mm_txnid`` u64. The valid meta with the larger
  txnid is the current one (``mdb_env_pick_meta``).
* A node is ``mn_lo`` u16, ``mn_hi`` u16, ``mn_flags`` u16, ``mn_ksize`` u16, then the key, then the value.
  In a branch node ``lo | hi << 16 | flags << 32`` is the child's page number; in a leaf node ``lo | hi <<
  16`` is the value's size and flags say F_BIGDATA 1 (the value is in an overflow run whose first page
  number is the 8 bytes stored) or F_SUBDATA 2 (the value is a named DB's ``MDB_db``, in the main DB).
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from libraryfs.errors import Damaged
from libraryfs.words import count

DATA_FILE = "data.mdb"
MAGIC = 0xBEEFC0DE
DATA_VERSION = 1
HEADER_BYTES = 16  #: PAGEHDRSZ
NODE_BYTES = 8  #: NODESIZE
P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2 = 0x01, 0x02, 0x04, 0x08, 0x20
F_BIGDATA, F_SUBDATA, F_DUPDATA = 0x01, 0x02, 0x04
P_INVALID = (1 << 64) - 1
FREE_DB, MAIN_DB = "(free)", "(main)"  #: keys of LMDB's two internal DBs in :attr:`WalkReport.records`
#: What a finding calls each of LMDB's two internal DBs (a named table is ``table <name>``).
_DB_WORDS = {FREE_DB: "LMDB's free-page list", MAIN_DB: "LMDB's list of tables"}
MAX_DEPTH = 64  #: deeper than any B+tree of 2^64 pages: a cycle

_DB = struct.Struct("<IHHQQQQQ")  #: MDB_db: pad/psize, flags, depth, branch, leaf, overflow, entries, root
_NODE = struct.Struct("<HHHH")


@dataclass(frozen=True)
class Meta:
    """The current meta page of a data file: page size and map size in bytes, the last page number in
    use, the transaction id, the roots of the free DB and the main DB (:data:`P_INVALID`: empty)."""

    slot: int
    page_size: int
    map_size: int
    last_pgno: int
    txnid: int
    free_root: int
    main_root: int
    main_entries: int


@dataclass
class WalkReport:
    """What :func:`walk` found: ``problems`` (one line each, ``page N of table T: what``), pages and records
    read per table, and the named tables it reached. ``clean`` when nothing was wrong."""

    meta: Meta | None = None
    problems: list[str] = field(default_factory=list)
    pages: int = 0
    records: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)

    unsettled: bool = False  #: every walk was overtaken by commits: the problems may be reused pages
    read: set[int] = field(default_factory=set)  #: pages read (incremental walk)
    free: set[int] = field(default_factory=set)  #: pages on LMDB's free list (incremental walk)
    scrubbed: int = 0  #: ledger pages re-read and found unchanged (:data:`SCRUB_PAGES`)
    incremental: bool = False  #: a walk of the changed pages only (:func:`verify_since`), not of every page
    reused: int = 0  #: subtrees not read: their top page was byte-identical to one a clean walk verified

    @property
    def clean(self) -> bool:
        """True when the walk found no problem."""
        return not self.problems


def data_path(store_dir: str) -> str:
    """``<store_dir>/data.mdb``."""
    return os.path.join(store_dir, DATA_FILE)


def _parse_meta(raw: bytes, slot: int) -> Meta | str:
    """A meta page's fields, or a one-line reason why it is not a valid meta page."""
    if len(raw) < 152:
        return f"meta page {slot} is cut short ({len(raw)} bytes)"
    pgno, _pad, flags = struct.unpack_from("<QHH", raw, 0)
    magic, version, _addr, map_size = struct.unpack_from("<IIQQ", raw, 16)
    free = _DB.unpack_from(raw, 40)
    main = _DB.unpack_from(raw, 88)
    last_pgno, txnid = struct.unpack_from("<QQ", raw, 136)
    if magic != MAGIC:
        return f"meta page {slot} has no LMDB magic number (0x{magic:08x})"
    if version != DATA_VERSION:
        return f"meta page {slot} has LMDB data version {version}, expected {DATA_VERSION}"
    if pgno != slot or not flags & P_META:
        return f"meta page {slot} has a bad header (page number {pgno}, flags 0x{flags:x})"
    psize = free[0]
    if psize < 512 or psize > 65536 or psize & (psize - 1):
        return f"meta page {slot} records an impossible page size {psize}"
    return Meta(slot, psize, map_size, last_pgno, txnid, free[7], main[7], main[6])


def _read_metas(path: str) -> tuple[list[Meta | str], int]:
    """Both meta pages (parsed, or a reason each) and the file size in bytes, with plain reads."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        head = os.pread(fd, 152, 0)
        first = _parse_meta(head, 0)
        psize = first.page_size if isinstance(first, Meta) else 4096
        second = _parse_meta(os.pread(fd, 152, psize), 1)
        size = os.fstat(fd).st_size  # after the metas: the file only grows, and pages precede their meta
    finally:
        os.close(fd)
    return [first, second], size


def _judge(metas: list[Meta | str], size: int, where: str) -> Meta | str:
    """The current meta of a data file of ``size`` bytes, or why the file is damaged (one line)."""
    good = [m for m in metas if isinstance(m, Meta)]
    if len(good) < len(metas):
        return next(m for m in metas if isinstance(m, str))
    m0, m1 = good
    if m0.page_size != m1.page_size:
        return f"the meta pages disagree on the page size ({m0.page_size} vs {m1.page_size})"
    cur = max(good, key=lambda m: m.txnid)
    need = (cur.last_pgno + 1) * cur.page_size
    if size < need:
        return (
            f"{where} is truncated: {size} bytes, but its meta page says {cur.last_pgno + 1} pages of "
            f"{cur.page_size} bytes ({need} bytes) are in use"
        )
    if cur.map_size < need:
        return f"{where}: map size {cur.map_size} bytes is below the {need} bytes in use"
    for name, root in (("free", cur.free_root), ("main", cur.main_root)):
        if root != P_INVALID and not 2 <= root <= cur.last_pgno:
            return f"{where}: the {name} DB's root page {root} is outside pages 2..{cur.last_pgno}"
    return cur


def check_meta(store_dir: str, *, retries: int = 3) -> Meta:
    """Check a store's data file before LMDB maps it: both meta pages valid, the file at least as long as
    the last page in use, the map size and the roots consistent. Returns the current :class:`Meta`.

    A reading taken while a writer commits can see a half-written meta page, so a failing reading is
    repeated (``retries`` times, 20 ms apart) before it counts. Raises :class:`~libraryfs.errors.Damaged`
    (one line naming the file and what is wrong); ``FileNotFoundError`` when there is no data file.
    """
    path = data_path(store_dir)
    where = path
    verdict: Meta | str = "unread"
    for attempt in range(retries + 1):
        size = os.path.getsize(path)
        if size < 2 * 512:
            verdict = f"{where} is truncated: {size} bytes, shorter than its two meta pages"
        else:
            metas, size = _read_metas(path)
            verdict = _judge(metas, size, where)
        if isinstance(verdict, Meta):
            return verdict
        if attempt < retries:
            time.sleep(0.02)
    raise Damaged(f"the library's store is damaged: {verdict}; run `libraryfs check`")


class _Reader:
    """Page reads of one data file, every one bounds-checked (a finding instead of a signal)."""

    def __init__(
        self,
        fd: int,
        meta: Meta,
        size: int,
        report: WalkReport,
        ledger: Ledger | None = None,
        reuse: bool = False,
    ) -> None:
        self.fd, self.meta, self.report = fd, meta, report
        self.psize = meta.page_size
        self.file_pages = size // self.psize
        self.npages = min(self.file_pages, meta.last_pgno + 1)
        self.seen: set[int] = set()
        self.bad_tables: set[str] = set()  #: tables with a finding (their record counts fall short)
        self.ledger = ledger  #: filled with every branch/leaf page read (its digest and subtree records)
        self.reuse = reuse  #: skip the subtree under a page the ledger holds byte-identical

    def page(self, pgno: int, table: str) -> bytes | None:
        """Page ``pgno`` (checked: in range, not reached before, its header naming it), or None."""
        if not 2 <= pgno < self.npages:
            self._bad(pgno, table, self._out_of_range(pgno))
            return None
        if pgno in self.seen:
            self._bad(pgno, table, "page reached twice (a cycle or a shared page)")
            return None
        self.seen.add(pgno)
        raw = os.pread(self.fd, self.psize, pgno * self.psize)
        if len(raw) < self.psize:
            self._bad(pgno, table, "short read")
            return None
        own = struct.unpack_from("<Q", raw, 0)[0]
        if own != pgno:
            self._bad(pgno, table, f"header names page {own} (overwritten?)")
            return None
        self.report.pages += 1
        return raw

    def _out_of_range(self, pgno: int) -> str:
        """Why page number ``pgno`` (pointed to by a tree) cannot be a tree page of this file: one of the two
        meta pages, past the end of a file cut short, or past the last page the meta page says is in use."""
        if pgno < 2:
            return f"points to meta page {pgno}, not to a tree page"
        if pgno >= self.file_pages:
            held = (
                "no whole page"
                if self.file_pages < 1
                else "page 0 only"
                if self.file_pages == 1
                else f"pages 0 to {self.file_pages - 1}"
            )
            return f"past the end of the file, which holds {held} ({self.file_pages * self.psize:,} bytes)"
        return f"past the last page in use, {self.meta.last_pgno} (the meta page's count)"

    def _bad(self, pgno: int, table: str, what: str) -> None:
        """Record a problem of page ``pgno`` of ``table``: ``page 7 of table inodes: what``."""
        self.bad_tables.add(table)
        self.report.problems.append(f"page {pgno} of {_DB_WORDS.get(table) or f'table {table}'}: {what}")

    def overflow(self, pgno: int, nbytes: int, table: str, read: bool = True) -> bytes | None:
        """The value of ``nbytes`` stored in the overflow run starting at ``pgno`` (``read`` False: only its
        first page is read and checked, b"" stands for the value), or None when the run is damaged."""
        raw = self.page(pgno, table)
        if raw is None:
            return None
        flags, npages = struct.unpack_from("<HI", raw, 10)
        if not flags & P_OVERFLOW or npages < 1 or pgno + npages > self.npages:
            self._bad(pgno, table, f"bad overflow header (flags 0x{flags:x}, {npages} pages)")
            return None
        if nbytes > npages * self.psize - HEADER_BYTES:
            self._bad(pgno, table, f"value of {nbytes} bytes does not fit {npages} overflow pages")
            return None
        self.seen.update(range(pgno + 1, pgno + npages))
        self.report.pages += npages - 1
        if not read:
            return b""
        rest = nbytes - (self.psize - HEADER_BYTES)
        tail = os.pread(self.fd, rest, (pgno + 1) * self.psize) if rest > 0 else b""
        return (raw[HEADER_BYTES:] + tail)[:nbytes]


Visit = Callable[[str, bytes, bytes], None]


def _nodes(raw: bytes, psize: int) -> list[int] | str:
    """Node offsets of a branch or leaf page, or why its header is impossible."""
    lower, upper = struct.unpack_from("<HH", raw, 12)
    if not HEADER_BYTES <= lower <= upper <= psize or (lower - HEADER_BYTES) % 2:
        return f"bad free-space bounds (lower {lower}, upper {upper})"
    offs = list(struct.unpack_from(f"<{(lower - HEADER_BYTES) // 2}H", raw, HEADER_BYTES))
    for off in offs:
        if not upper <= off <= psize - NODE_BYTES:
            return f"node offset {off} outside {upper}..{psize - NODE_BYTES}"
    return offs


def _walk_tree(
    r: _Reader, root: int, table: str, visit: Visit | None, named: list | None, depth: int = 0
) -> int:
    """Walk one B+tree from ``root``, skipping (and reporting) damaged subtrees. ``named`` collects the
    main DB's named tables as ``(name, root, entries)``; ``visit(table, key, value)`` gets each record.
    Returns the records reached below ``root``. With ``r.reuse``, a page the ledger holds with the same
    bytes is not descended into: its subtree's records are the ledger's (the main DB is always read)."""
    if depth > MAX_DEPTH:
        r._bad(root, table, f"tree deeper than {MAX_DEPTH} levels (a cycle)")
        return 0
    raw = r.page(root, table)
    if raw is None:
        return 0
    digest = 0
    if r.ledger is not None:
        digest = page_digest(raw)
        if r.reuse and table not in (MAIN_DB, FREE_DB):
            known = r.ledger.records_if(root, digest)
            if known is not None:
                r.report.records[table] = r.report.records.get(table, 0) + known
                r.report.reused += 1
                return known
    flags = struct.unpack_from("<H", raw, 10)[0]
    offs = _nodes(raw, r.psize) if flags & (P_BRANCH | P_LEAF) and not flags & P_LEAF2 else "bad page flags"
    if isinstance(offs, str):
        r._bad(
            root,
            table,
            offs if offs != "bad page flags" else f"not a branch or leaf page (flags 0x{flags:x})",
        )
        return 0
    prev = None
    count = 0
    for i, off in enumerate(offs):
        lo, hi, nflags, ksize = _NODE.unpack_from(raw, off)
        kend = off + NODE_BYTES + ksize
        if kend > r.psize:
            r._bad(root, table, f"node {i}'s key runs past the page")
            return count
        key = raw[off + NODE_BYTES : kend]
        if i and table != FREE_DB and key <= prev:  # type: ignore[operator]
            r._bad(root, table, f"keys out of order at node {i}")
            return count
        prev = key
        if flags & P_BRANCH:
            count += _walk_tree(r, lo | hi << 16 | nflags << 32, table, visit, named, depth + 1)
            continue
        dsize = lo | hi << 16
        if nflags & F_DUPDATA:
            r._bad(root, table, "duplicate-key node (this store never writes one)")
            continue
        if nflags & F_BIGDATA:
            if kend + 8 > r.psize:
                r._bad(root, table, f"node {i}'s overflow pointer runs past the page")
                return count
            value = r.overflow(struct.unpack_from("<Q", raw, kend)[0], dsize, table, read=visit is not None)
            if value is None:
                continue
        else:
            if kend + dsize > r.psize:
                r._bad(root, table, f"node {i}'s value runs past the page")
                return count
            value = raw[kend : kend + dsize]
        r.report.records[table] = r.report.records.get(table, 0) + 1
        count += 1
        if nflags & F_SUBDATA and named is not None:
            if len(value) != _DB.size:
                r._bad(root, table, f"named DB {key!r} has a {len(value)}-byte record")
                continue
            db = _DB.unpack(value)
            named.append((key, db[7], db[6]))
        elif visit is not None:
            visit(table, key, value)
    if r.ledger is not None:
        r.ledger.put(root, digest, count)
    return count


def _free_pages(report: WalkReport) -> Visit:
    """A visitor of the free DB's records that adds their page numbers to ``report.free``. A record is
    an ``MDB_IDL``: a u64 count, then that many u64 page numbers (a short record gives what it holds)."""

    def visit(_table: str, _key: bytes, value: bytes) -> None:
        """Add the page numbers of one free-list record to ``report.free``."""
        if len(value) < 8:
            return
        n = min(struct.unpack_from("<Q", value, 0)[0], len(value) // 8 - 1)
        report.free.update(struct.unpack_from(f"<{n}Q", value, 8))

    return visit


def walk(
    store_dir: str, visit: Visit | None = None, *, slot: int | None = None, ledger: Ledger | None = None
) -> WalkReport:
    """See :func:`_walk_once`, made safe beside a writer.

    LMDB keeps the last two committed snapshots intact: a write transaction only reuses pages freed before
    them. A walk of snapshot N is therefore exact while the meta page says at most N+1 at its end. Problems
    count only when a second walk finds them too and was not overtaken by more commits than that (the first
    may have read a meta page half-written, or pages since reused); 3 walks at most. If the problems were
    never confirmed, the report is ``unsettled``: they are not evidence. ``visit`` and ``slot`` walks (a
    salvage, with the library unmounted) are walked once. ``ledger`` (emptied before each walk) receives
    the pages of the last one (:func:`verify_since`).
    """
    report = WalkReport()
    for attempt in range(3):
        if ledger is not None:
            ledger.clear()
        report = _walk_once(store_dir, visit, slot=slot, ledger=ledger)
        if report.clean or report.meta is None or visit is not None or slot is not None:
            return report
        try:
            now = check_meta(store_dir, retries=0).txnid
        except Damaged:
            return report
        if attempt and now <= report.meta.txnid + 1:
            return report
    report.unsettled = True
    return report


def _walk_once(
    store_dir: str,
    visit: Visit | None = None,
    *,
    slot: int | None = None,
    ledger: Ledger | None = None,
    reuse: bool = False,
) -> WalkReport:
    """Walk every reachable page of a store's data file with plain reads: the free DB, the main DB and each
    named DB. Each damaged page or subtree is reported and skipped; the rest is read. ``visit(table, key,
    value)`` receives every readable record of the named tables (salvage). ``slot`` (0 or 1) walks the tree
    of that meta page instead of the current one (the other holds the previous transaction).

    ``ledger`` (:class:`Ledger`) receives the digest and subtree record count of every branch/leaf page
    read; with ``reuse`` the subtree under a page the ledger already holds byte-identical is not read
    (:func:`verify_since`'s incremental walk; ``report.incremental``).

    Never raises for a damaged file: a bad meta page or a truncated file is a problem, and the pages the
    file still holds are walked (no tree at all when neither meta page is usable).
    Cost: one ``pread`` per branch/leaf page and per overflow run (values only when visiting): 22 ms for
    1,000 files (23 MB), 0.27 s for 10,000 (222 MB), as long as LMDB reading every record (bench/store_walk.py).
    """
    report = WalkReport()
    path = data_path(store_dir)
    size = os.path.getsize(path)
    if size < 2 * 512:
        what = (
            "is empty (0 bytes)"
            if size == 0
            else f"is truncated: {size} bytes, shorter than its two meta pages"
        )
        report.problems.append(f"{path} {what}")
        return report
    metas, size = _read_metas(path)
    verdict = _judge(metas, size, path)
    valid = [m for m in metas if isinstance(m, Meta)]
    if isinstance(verdict, str):  # still walk what the file holds (a truncated file: up to its end)
        report.problems.append(verdict)
    chosen = metas[slot] if slot is not None else verdict
    if isinstance(chosen, Meta):
        meta = chosen
    elif slot is None and valid:
        meta = max(valid, key=lambda m: m.txnid)
    else:
        return report
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        report.meta = meta
        report.incremental = reuse and ledger is not None
        if ledger is not None:
            ledger.reserve(meta.last_pgno + 1)
        r = _Reader(fd, meta, os.fstat(fd).st_size, report, ledger, reuse)
        if reuse:
            report.read = r.seen
        if meta.free_root != P_INVALID:
            _walk_tree(r, meta.free_root, FREE_DB, _free_pages(report) if reuse else None, None)
        named: list[tuple[bytes, int, int]] = []
        if meta.main_root != P_INVALID:
            _walk_tree(r, meta.main_root, MAIN_DB, None, named)
        for name, root, entries in named:
            table = name.decode(errors="backslashreplace")
            report.expected[table] = entries
            report.records.setdefault(table, 0)
            if root != P_INVALID:
                _walk_tree(r, root, table, visit, None)
        for table, entries in report.expected.items():
            if report.records[table] != entries and table not in r.bad_tables:
                report.problems.append(
                    f"table {table}: {report.records[table]} records reached, its header says {entries}"
                )
    finally:
        os.close(fd)
    return report


def verify(store_dir: str, *, ledger: Ledger | None = None) -> WalkReport:
    """:func:`walk` without visiting; raises :class:`~libraryfs.errors.Damaged` naming the first problem
    and how many there are (what ``mount`` does before serving). Returns the report (clean, or unsettled
    by a writer's commits: then nothing is claimed). ``ledger``: see :func:`walk`."""
    report = walk(store_dir, ledger=ledger)
    if report.problems and not report.unsettled:  # a store written faster than it is walked: LMDB decides
        more = f" (and {count(len(report.problems) - 1, 'more problem')})" if len(report.problems) > 1 else ""
        raise Damaged(
            f"the library's store is damaged: {data_path(store_dir)}: {report.problems[0]}{more}; "
            f"run `libraryfs check --repair`"
        )
    return report


#: A data file changed less than this long before ``status`` read its state is walked but not remembered:
#: a file's ctime has the resolution of the kernel's coarse clock (a few ms) or of the filesystem (1 s on
#: ext4 with 128-byte inodes and on many network filesystems; 2 s for FAT's times), so a second write within
#: that tick of the last one could leave every remembered field as it was. Past this margin any later write
#: gets a later ctime (unless the wall clock is set back by more than the margin).
SETTLE_S = 2.0


def _identity(store_dir: str, meta: Meta) -> tuple[list, int]:
    """What names one state of the data file, and its ctime (ns): the meta page's txnid, a hash of both
    meta pages, and the file's device, inode number, size, mtime and ctime (ns). Any write to the file
    through the kernel changes the ctime, whatever the writer (LMDB, ``dd``, a copy); a txnid alone would
    miss pages overwritten by another program, the meta hash catches meta pages rewritten with the txnid."""
    path = data_path(store_dir)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        metas = hashlib.blake2b(os.pread(f.fileno(), 2 * meta.page_size, 0), digest_size=16).hexdigest()
    ident = [meta.txnid, metas, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return ident, st.st_ctime_ns


def page_digest(raw: bytes) -> int:
    """A page's 64-bit digest (the first 8 bytes of its SHA-1: 4 µs a 4 KiB page with the CPU's SHA
    instructions, BLAKE2b 9 µs), never 0 (0 marks "no page" in a :class:`Ledger`). Not a defence against
    a forger (who could as well write a valid page): a changed page matches by chance with probability
    2⁻⁶³."""
    return int.from_bytes(hashlib.sha1(raw, usedforsecurity=False).digest()[:8], "little") | 1


_LEDGER_HEAD = struct.Struct("<8sQQQQQ")  #: magic, st_dev, st_ino, page size, scrub cursor, pages
_LEDGER_MAGIC = b"LFSPAGE2"

#: Pages of the ledger re-read by each incremental walk (:func:`verify_since`), in a rotating window, to
#: find bytes changed under unchanged parents: ~10 ms of CPU; every page of a 74k-page store within 73 walks.
SCRUB_PAGES = 1024


class Ledger:
    """The branch and leaf pages a clean walk verified: per page number, the page's digest
    (:func:`page_digest`, 0: none) and the records in the subtree under it, for the data file of one
    device and inode number. Kept beside ``status``'s state (``<record>.pages``, 16 bytes a page of the
    file: 1.2 MB at 10⁵ entries) so the next walk reads only the pages that changed (:func:`verify_since`)."""

    def __init__(self, dev: int, ino: int, page_size: int) -> None:
        self.dev, self.ino, self.page_size = dev, ino, page_size
        self.cursor = 0  #: where the next scrub starts (a page number)
        self.digests = array.array("Q")
        self.records = array.array("Q")

    def records_if(self, pgno: int, digest: int) -> int | None:
        """The records under page ``pgno`` when the ledger holds that page with this ``digest``, else None."""
        if pgno < len(self.digests) and self.digests[pgno] == digest:
            return self.records[pgno]
        return None

    def clear(self) -> None:
        """Forget every page (the scrub cursor too)."""
        self.digests = array.array("Q")
        self.records = array.array("Q")
        self.cursor = 0

    def reserve(self, npages: int) -> None:
        """Room for pages 0 .. ``npages`` - 1 (new ones hold nothing)."""
        grow = npages - len(self.digests)
        if grow > 0:
            self.digests.frombytes(bytes(8 * grow))
            self.records.frombytes(bytes(8 * grow))

    def put(self, pgno: int, digest: int, records: int) -> None:
        """Remember page ``pgno`` (verified, ``digest``, ``records`` below it)."""
        if pgno >= len(self.digests):
            self.reserve(pgno + 1)
        self.digests[pgno] = digest
        self.records[pgno] = records

    @classmethod
    def load(cls, path: str, dev: int, ino: int, page_size: int) -> Ledger | None:
        """The ledger at ``path`` if it is of this data file (device, inode number, page size); None when
        it is missing, unreadable, of another file or cut short."""
        try:
            with open(path, "rb") as f:
                head = f.read(_LEDGER_HEAD.size)
                if len(head) < _LEDGER_HEAD.size:
                    return None
                magic, l_dev, l_ino, l_psize, cursor, n = _LEDGER_HEAD.unpack(head)
                if (magic, l_dev, l_ino, l_psize) != (_LEDGER_MAGIC, dev, ino, page_size) or n > 1 << 40:
                    return None
                body = f.read(16 * n + 1)
        except OSError:
            return None
        if len(body) != 16 * n:
            return None
        led = cls(dev, ino, page_size)
        led.cursor = cursor
        led.digests.frombytes(body[: 8 * n])
        led.records.frombytes(body[8 * n :])
        if sys.byteorder != "little":  # pragma: no cover - the file is written little-endian
            led.digests.byteswap()
            led.records.byteswap()
        return led

    def save(self, path: str) -> None:
        """Write the ledger to ``path`` atomically (a temporary file renamed); OSError is the caller's."""
        digests, records = array.array("Q", self.digests), array.array("Q", self.records)
        if sys.byteorder != "little":  # pragma: no cover
            digests.byteswap()
            records.byteswap()
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(
                    _LEDGER_HEAD.pack(
                        _LEDGER_MAGIC, self.dev, self.ino, self.page_size, self.cursor, len(digests)
                    )
                )
                f.write(digests.tobytes())
                f.write(records.tobytes())
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _scrub(store_dir: str, ledger: Ledger, report: WalkReport, count: int) -> int | None:
    """Re-read up to ``count`` pages the ledger holds, from ``ledger.cursor`` on (wrapping), leaving out
    those the incremental walk ``report`` read and those on LMDB's free list; advances the cursor. Returns
    the first page whose bytes differ from the ledger's (overwritten behind LMDB's back, or rewritten by
    LMDB under a page it rewrote byte-identically: the full walk tells which), or None."""
    n = len(ledger.digests)
    npages = report.meta.last_pgno + 1 if report.meta else 0
    if not n or not npages:
        return None
    psize = ledger.page_size
    fd = os.open(data_path(store_dir), os.O_RDONLY | os.O_CLOEXEC)
    try:
        pgno = ledger.cursor % n
        for _ in range(min(count, n)):
            digest = ledger.digests[pgno]
            if digest and pgno < npages and pgno not in report.read and pgno not in report.free:
                raw = os.pread(fd, psize, pgno * psize)
                if len(raw) < psize or page_digest(raw) != digest:
                    return pgno
                report.scrubbed += 1
            pgno = (pgno + 1) % n
        ledger.cursor = pgno
    finally:
        os.close(fd)
    return None


def _settled(store_dir: str, report: WalkReport) -> bool:
    """True when the data file's meta page says at most one commit past the snapshot ``report`` walked:
    LMDB keeps the last two snapshots intact, so every page the walk read belonged to its snapshot."""
    if report.meta is None:
        return False
    try:
        return check_meta(store_dir, retries=0).txnid <= report.meta.txnid + 1
    except (Damaged, OSError):
        return False


def verify_since(
    store_dir: str, record_path: str, *, settle_s: float = SETTLE_S, incremental: bool = True
) -> WalkReport | None:
    """:func:`verify` at the cost of what changed: skipped when the data file is still in the state the last
    clean walk saw, else (``incremental``) a walk of the pages that changed since a clean walk, else every page.

    Always checks the meta pages (:func:`check_meta`: truncation below the last page in use, bad meta
    pages). The state (:func:`_identity`, taken *before* the walk, so a commit during the walk only makes
    the next call walk again) is kept in ``record_path`` (JSON) after a clean walk, unless the file changed
    less than ``settle_s`` before (:data:`SETTLE_S`: a write in the same timestamp tick could go unseen).

    The incremental walk: every clean walk leaves a :class:`Ledger` (``<record_path without .json>.pages``)
    of the digest of every branch and leaf page it verified and the records under it. The next walk reads
    each table's root page and descends only into pages whose bytes differ from the ledger's page of that
    number, checking each such page as :func:`walk` does (own number, bounds, node offsets, key order,
    overflow headers, child numbers in range, no page reached twice among those read); the main DB is always
    read; under a byte-identical page it takes the ledger's record count and reads nothing. LMDB never
    writes a committed page in place (copy-on-write: changing anything below a page rewrites that page to a
    new number), so after LMDB commits, the pages read are the paths from each root to what changed: about
    depth × pages written, not the file's size. A page number LMDB freed and reused with the same bytes as
    before (its subtree may differ) is harmless: what lies under it was written by LMDB. If the walk finds
    any problem, or a table whose records are not the number its header says (that reuse can shift a
    count), the ledger is not trusted: every page is walked as before and that walk decides (the same
    :class:`~libraryfs.errors.Damaged` line). A ledger is saved only when the walk was clean and not
    overtaken by more than one commit (:func:`_settled`), and belongs to one device and inode number.

    The scrub: after a clean incremental walk (not overtaken by commits), the next :data:`SCRUB_PAGES`
    pages of the ledger from a cursor kept in it (wrapping round) are re-read, leaving out the pages the
    walk read and those on LMDB's free list (parsed from the free DB, which is always read whole); one whose
    bytes differ from the ledger's sends the call to the full walk, which decides (LMDB rewrites pages only
    through their parents, so such a page was changed behind LMDB's back, or lies under a page LMDB rewrote
    byte-identically: then the full walk is clean and only costs time).

    Not seen at once, found within one rotation of the scrub (⌈ledger pages / SCRUB_PAGES⌉ incremental
    walks: 73 at 10⁵ entries) or by :func:`verify` (``check``, ``mount``, every read-write open): bytes
    changed by anything but LMDB (``dd``, a stray write, a bad sector) in a branch or leaf page whose every
    ancestor up to its table's root is byte-identical to the ledger's (one leaf overwritten while its
    parents were not). Not seen until a full walk: such a change in an overflow page (a large value's
    pages are not in the ledger), and a child pointer of a changed page redirected to another subtree the
    ledger holds (the full walk sees the page reached twice; this walk only a record count that differs).
    Not seen by any skip (as before):
    damage that reaches the disk without a write through this kernel when the identity is unchanged (bit rot
    under the page cache, writes to the block device), a program that keeps the file mapped writable and
    stores again into a page it dirtied before the state was read. The command's own read runs in a forked
    child (:func:`libraryfs.fs.isolated.run_isolated`), so a crash on such a page is still a one-line report;
    a page LMDB reads without crashing can give a silently wrong answer (docs/reliability.md).

    Returns the walk's report (``report.incremental`` says which walk decided), or None when the walk was
    skipped. Raises :class:`~libraryfs.errors.Damaged` like :func:`verify`.
    """
    now_ns = time.time_ns()
    meta = check_meta(store_dir)
    ident, ctime_ns = _identity(store_dir, meta)
    try:
        with open(record_path) as f:
            if json.load(f).get("identity") == ident:
                return None
    except (OSError, ValueError, AttributeError):
        pass
    dev, ino, psize = ident[2], ident[3], meta.page_size
    ledger_path = (record_path[:-5] if record_path.endswith(".json") else record_path) + ".pages"
    report: WalkReport | None = None
    ledger = Ledger.load(ledger_path, dev, ino, psize) if incremental else None
    if ledger is not None:
        report = _walk_once(store_dir, ledger=ledger, reuse=True)
        if not report.clean:
            report = None  # the ledger is not trusted: every page decides
        elif _settled(store_dir, report):
            changed = _scrub(store_dir, ledger, report, SCRUB_PAGES)
            if changed is not None and _settled(store_dir, report):  # else LMDB may have reused it since
                report = None  # a page changed under unchanged parents: every page decides
    if report is None:
        ledger = Ledger(dev, ino, psize)
        report = verify(store_dir, ledger=ledger)  # confirmed problems raise; unsettled ones claim nothing
    if report.clean and ledger is not None and _settled(store_dir, report):
        with contextlib.suppress(OSError):  # a read-only state directory: a full walk every time
            ledger.save(ledger_path)
    if report.clean and ctime_ns <= now_ns - int(settle_s * 1e9):
        tmp = f"{record_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"identity": ident, "pages": report.pages}, f)
            os.replace(tmp, record_path)
        except OSError:  # a read-only state directory: walk every time
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return report
