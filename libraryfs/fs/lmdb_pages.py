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

import contextlib
import hashlib
import json
import os
import struct
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

    def __init__(self, fd: int, meta: Meta, size: int, report: WalkReport) -> None:
        self.fd, self.meta, self.report = fd, meta, report
        self.psize = meta.page_size
        self.file_pages = size // self.psize
        self.npages = min(self.file_pages, meta.last_pgno + 1)
        self.seen: set[int] = set()
        self.bad_tables: set[str] = set()  #: tables with a finding (their record counts fall short)

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
) -> None:
    """Walk one B+tree from ``root``, skipping (and reporting) damaged subtrees. ``named`` collects the
    main DB's named tables as ``(name, root, entries)``; ``visit(table, key, value)`` gets each record."""
    if depth > MAX_DEPTH:
        r._bad(root, table, f"tree deeper than {MAX_DEPTH} levels (a cycle)")
        return
    raw = r.page(root, table)
    if raw is None:
        return
    flags = struct.unpack_from("<H", raw, 10)[0]
    offs = _nodes(raw, r.psize) if flags & (P_BRANCH | P_LEAF) and not flags & P_LEAF2 else "bad page flags"
    if isinstance(offs, str):
        r._bad(
            root,
            table,
            offs if offs != "bad page flags" else f"not a branch or leaf page (flags 0x{flags:x})",
        )
        return
    prev = None
    for i, off in enumerate(offs):
        lo, hi, nflags, ksize = _NODE.unpack_from(raw, off)
        kend = off + NODE_BYTES + ksize
        if kend > r.psize:
            r._bad(root, table, f"node {i}'s key runs past the page")
            return
        key = raw[off + NODE_BYTES : kend]
        if i and table != FREE_DB and key <= prev:  # type: ignore[operator]
            r._bad(root, table, f"keys out of order at node {i}")
            return
        prev = key
        if flags & P_BRANCH:
            _walk_tree(r, lo | hi << 16 | nflags << 32, table, visit, named, depth + 1)
            continue
        dsize = lo | hi << 16
        if nflags & F_DUPDATA:
            r._bad(root, table, "duplicate-key node (this store never writes one)")
            continue
        if nflags & F_BIGDATA:
            if kend + 8 > r.psize:
                r._bad(root, table, f"node {i}'s overflow pointer runs past the page")
                return
            value = r.overflow(struct.unpack_from("<Q", raw, kend)[0], dsize, table, read=visit is not None)
            if value is None:
                continue
        else:
            if kend + dsize > r.psize:
                r._bad(root, table, f"node {i}'s value runs past the page")
                return
            value = raw[kend : kend + dsize]
        r.report.records[table] = r.report.records.get(table, 0) + 1
        if nflags & F_SUBDATA and named is not None:
            if len(value) != _DB.size:
                r._bad(root, table, f"named DB {key!r} has a {len(value)}-byte record")
                continue
            db = _DB.unpack(value)
            named.append((key, db[7], db[6]))
        elif visit is not None:
            visit(table, key, value)


def walk(store_dir: str, visit: Visit | None = None, *, slot: int | None = None) -> WalkReport:
    """See :func:`_walk_once`, made safe beside a writer.

    LMDB keeps the last two committed snapshots intact: a write transaction only reuses pages freed before
    them. A walk of snapshot N is therefore exact while the meta page says at most N+1 at its end. Problems
    count only when a second walk finds them too and was not overtaken by more commits than that (the first
    may have read a meta page half-written, or pages since reused); 3 walks at most. If the problems were
    never confirmed, the report is ``unsettled``: they are not evidence. ``visit`` and ``slot`` walks (a
    salvage, with the library unmounted) are walked once.
    """
    report = WalkReport()
    for attempt in range(3):
        report = _walk_once(store_dir, visit, slot=slot)
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


def _walk_once(store_dir: str, visit: Visit | None = None, *, slot: int | None = None) -> WalkReport:
    """Walk every reachable page of a store's data file with plain reads: the free DB, the main DB and each
    named DB. Each damaged page or subtree is reported and skipped; the rest is read. ``visit(table, key,
    value)`` receives every readable record of the named tables (salvage). ``slot`` (0 or 1) walks the tree
    of that meta page instead of the current one (the other holds the previous transaction).

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
        r = _Reader(fd, meta, os.fstat(fd).st_size, report)
        if meta.free_root != P_INVALID:
            _walk_tree(r, meta.free_root, FREE_DB, None, None)
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


def verify(store_dir: str) -> WalkReport:
    """:func:`walk` without visiting; raises :class:`~libraryfs.errors.Damaged` naming the first problem
    and how many there are (what ``mount`` does before serving). Returns the report (clean, or unsettled
    by a writer's commits: then nothing is claimed)."""
    report = walk(store_dir)
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


def verify_since(store_dir: str, record_path: str, *, settle_s: float = SETTLE_S) -> WalkReport | None:
    """:func:`verify`, skipped when the data file is still in the state the last clean walk saw.

    Always checks the meta pages (:func:`check_meta`). The state (:func:`_identity`, taken *before* the
    walk, so a commit during the walk only makes the next call walk again) is kept in ``record_path``
    (JSON) after a clean walk, unless the file changed less than ``settle_s`` before (:data:`SETTLE_S`: a
    write in the same timestamp tick could go unseen). Returns the walk's report, or None when the walk
    was skipped. Raises :class:`~libraryfs.errors.Damaged` like :func:`verify`. Not seen without a walk:
    damage that reaches the disk without a write through this kernel (bit rot under the page cache, writes
    to the block device), and a program that keeps the file mapped writable and stores again into a page
    it dirtied before the state was read (the kernel updates the ctime on a page's first store after
    write-back only); ``libraryfs check`` always walks (docs/architecture.md, "Damaged stores").
    """
    now_ns = time.time_ns()
    ident, ctime_ns = _identity(store_dir, check_meta(store_dir))
    try:
        with open(record_path) as f:
            if json.load(f).get("identity") == ident:
                return None
    except (OSError, ValueError, AttributeError):
        pass
    report = verify(store_dir)
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
