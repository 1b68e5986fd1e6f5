"""The typed store: ``Store`` (open, create, schema version and migrations) and ``Txn`` (typed records).

Layout, codecs and invariants: :mod:`libraryfs.fs.schema`; upgrades of older stores:
:mod:`libraryfs.fs.migrations`. Both classes sit on a backend (:mod:`libraryfs.fs.backend`; LMDB by default,
:mod:`libraryfs.fs.lmdb_backend`, where threading, durability and map growth are described) and are the
same for every backend. Code outside the backends reaches raw tables only through ``Txn.kv`` (the
backend's ReadTxn/WriteTxn), never through an engine handle.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from libraryfs.errors import Corrupt, Damaged
from libraryfs.fs import lmdb_backend
from libraryfs.fs import schema as S
from libraryfs.fs.backend import Backend, bound_getter
from libraryfs.fs.backends import create_remote, make_libdir, open_backend, write_store_url
from libraryfs.fs.backends import is_library as is_library  # re-exported: the import path callers have used

T = TypeVar("T")
log = logging.getLogger("libraryfs.store")

#: Errors the storage engines raise for an unreadable/corrupt store (the CLI prints them on one line).
StoreError: tuple[type[Exception], ...] = lmdb_backend.ENGINE_ERRORS


#: directory levels up to which a walk up the ``dirparent`` links counts only; past them it remembers the
#: directories met to find a cycle (a deeper tree is legal: ``mkdir -p`` goes past PATH_MAX with ``mkdirat``)
DEEP = 4096

_ZERO_PAGE = bytes(S.ALLOC_UNIT)  #: one all-zero page: the data runs' hole test (Txn.data_runs)


def _cut(lo: int, hi: int, file_size: int) -> Iterator[tuple[int, int]]:
    """The run ``[lo, hi)`` cut at ``file_size`` (nothing if it starts there or later)."""
    hi = min(hi, file_size)
    if lo < hi:
        yield lo, hi


def now_ns() -> int:
    """Wall-clock time in ns since the epoch."""
    return time.time_ns()


class Txn:
    """A transaction with typed access to the tables of :mod:`libraryfs.fs.schema`.

    Obtain it from :meth:`Store.read` (a context manager) or inside :meth:`Store.run_write`; never keep it
    past its block. ``kv`` is the backend transaction (get/range/prefix/count, and put/delete/delete_range
    in a write transaction) for code that owns a table's raw layout: check, migrations, extension tables.
    """

    __slots__ = ("kv", "s", "write", "_cm")

    def __init__(self, store: Store, kv: Any, write: bool, cm: AbstractContextManager | None = None) -> None:
        self.kv = kv
        self.s = store
        self.write = write
        self._cm = cm

    def __enter__(self) -> Txn:
        self.kv = self._cm.__enter__()  # type: ignore[union-attr]
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)  # type: ignore[union-attr]

    def snapshot(self) -> int | None:
        """An id of the committed state this read transaction sees: two read transactions with the same id
        see the same data (LMDB: the snapshot's transaction id, :meth:`LmdbTxn.snapshot
        <libraryfs.fs.lmdb_backend.LmdbTxn.snapshot>`). None for a write transaction and for a backend
        without such ids (etcd): then nothing read earlier may stand in for a read of this one."""
        if self.write:
            return None
        snapshot = getattr(self.kv, "snapshot", None)
        return None if snapshot is None else snapshot()

    def getter(self, table: bytes) -> Callable[[bytes], bytes | None]:
        """``kv.get`` bound to ``table``: one call per lookup in hot loops (the raw path walk)."""
        try:
            return self.kv.getter(table)
        except AttributeError:  # a backend without its own (backend.bound_getter is the shared one)
            return bound_getter(self.kv, table)

    # -- inodes ----------------------------------------------------------------------------------------
    def inode(self, ino: int) -> S.Inode | None:
        """The inode ``ino`` or ``None``; raises :class:`Corrupt` for an undecodable record."""
        raw = self.kv.get(S.DB_INODES, S.u64(ino))
        if raw is None:
            return None
        try:
            return S.Inode.unpack(ino, raw)
        except struct.error as e:  # not Exception: a RecursionError or MemoryError is no corrupt record
            raise Corrupt(f"inode {ino} is corrupt: {e}") from e

    def put_inode(self, node: S.Inode) -> None:
        """Store an inode record."""
        self.kv.put(S.DB_INODES, S.u64(node.ino), node.pack())

    def del_inode(self, ino: int, *, is_dir: bool = True) -> None:
        """Delete an inode with its data, xattrs, meta and TOC pages. ``is_dir=False`` (the caller read the
        inode: not a directory) skips the tables only directories have rows in (``dirparent``, ``toc``:
        both keyed by a directory's inode number, and inode numbers are never reused, invariant I6)."""
        k, end = S.u64(ino), S.u64(ino + 1)
        kv = self.kv
        kv.delete(S.DB_INODES, k)
        kv.delete(S.DB_META, k)
        kv.delete_range(S.DB_DATA, k, end)
        kv.delete_range(S.DB_XATTRS, k, end)
        if is_dir:
            kv.delete(S.DB_DIRPARENT, k)
            kv.delete_range(S.DB_TOC, k, end)

    def iter_inodes(self) -> Iterator[S.Inode]:
        """Every inode in inode-number order (raises :class:`Corrupt` at an undecodable one)."""
        for k, v in self.kv.range(S.DB_INODES):
            ino = S.from_u64(k)
            try:
                yield S.Inode.unpack(ino, v)
            except struct.error as e:  # not Exception: a RecursionError or MemoryError is no corrupt record
                raise Corrupt(f"inode {ino} is corrupt: {e}") from e

    def alloc_ino(self, count: int = 1) -> int:
        """A fresh inode number (I6); with ``count`` > 1 the first of ``count`` consecutive fresh numbers
        (a block the caller hands out itself; numbers it never uses are gaps, which I6 allows)."""
        raw = self.kv.get(S.DB_CONFIG, S.CFG_NEXT_INO)
        ino = S.from_u64(raw) if raw else 2
        self.kv.put(S.DB_CONFIG, S.CFG_NEXT_INO, S.u64(ino + count))
        return ino

    # -- dirents ---------------------------------------------------------------------------------------
    def lookup(self, parent: int, name: bytes) -> int | None:
        """Child inode number of ``name`` in directory ``parent`` (one B+tree lookup), or ``None``."""
        raw = self.kv.get(S.DB_DIRENTS, S.dirent_key(parent, name))
        return None if raw is None else S.from_u64(raw)

    def add_dirent(
        self, parent: int, name: bytes, child: int, child_is_dir: bool, mode: int | None = None
    ) -> None:
        """Insert a dirent (and the ``dirparent`` back-link for a directory).

        The value carries the child's file type (:func:`~libraryfs.fs.schema.dirent_value`) so that
        ``readdir`` needs no inode fetch; ``mode`` defaults to the stored inode's.
        """
        if mode is None:
            node = self.inode(child)
            mode = node.mode if node is not None else (S.S_IFDIR if child_is_dir else S.S_IFREG)
        self.kv.put(S.DB_DIRENTS, S.dirent_key(parent, name), S.dirent_value(child, mode))
        if child_is_dir:
            self.kv.put(S.DB_DIRPARENT, S.u64(child), S.u64(parent) + name)

    def del_dirent(self, parent: int, name: bytes) -> None:
        """Remove a dirent (the ``dirparent`` link is rewritten by whoever re-links the directory)."""
        self.kv.delete(S.DB_DIRENTS, S.dirent_key(parent, name))

    def dirparent(self, ino: int) -> tuple[int, bytes] | None:
        """``(parent ino, name)`` of a directory, ``None`` for the root or a file."""
        raw = self.kv.get(S.DB_DIRPARENT, S.u64(ino))
        return None if raw is None else (S.from_u64(raw), raw[8:])

    def iter_dir(self, parent: int, after: bytes | None = None) -> Iterator[tuple[bytes, int]]:
        """``(name, child ino)`` of a directory in name-byte order, starting after ``after``."""
        prefix = S.u64(parent)
        start = prefix + (after or b"")
        for k, v in self.kv.range(S.DB_DIRENTS, start, S.u64(parent + 1)):
            if after is not None and k == start:
                continue
            yield k[8:], S.from_u64(v)

    def iter_dir_typed(self, parent: int) -> Iterator[tuple[bytes, int, int | None]]:
        """``(name, child ino, file type bits S_IFMT or None if unrecorded)`` in name-byte order."""
        for k, v in self.kv.range(S.DB_DIRENTS, S.u64(parent), S.u64(parent + 1)):
            yield k[8:], S.from_u64(v), (v[8] << 12) if len(v) > 8 else None

    def dir_is_empty(self, ino: int) -> bool:
        """Whether a directory has no dirents."""
        return next(self.iter_dir(ino), None) is None

    def path_of(self, ino: int) -> bytes | None:
        """Absolute path (``b"/a/b"``) of a directory, or ``None`` if it is detached. Raises
        :class:`Corrupt` on a ``dirparent`` cycle (a real one: past :data:`DEEP` levels the directories met
        are remembered, so a tree of any depth has its path — a count limit called a 4,097-level chain a
        cycle)."""
        parts: list[bytes] = []
        seen: set[int] | None = None
        while ino != S.ROOT_INO:
            link = self.dirparent(ino)
            if link is None:
                return None
            if seen is not None:
                if ino in seen:
                    raise Corrupt("dirparent cycle")
                seen.add(ino)
            elif len(parts) >= DEEP:
                seen = {ino}
            ino, name = link
            parts.append(name)
        return b"/" + b"/".join(reversed(parts))

    # -- data ------------------------------------------------------------------------------------------
    def read_data(self, ino: int, offset: int, size: int, file_size: int) -> bytes:
        """Bytes ``[offset, offset+size)`` of a file of ``file_size`` bytes; holes read as zeros. A read
        inside one stored chunk returns its slice; a read of holes only is one zero-filled allocation (the
        missing chunks cost a failed lookup each, no per-byte work)."""
        if offset >= file_size or size <= 0:
            return b""
        end = min(offset + size, file_size)
        n = end - offset
        cs = S.CHUNK_SIZE
        out: bytearray | None = None
        c = offset // cs
        get = self.kv.get
        while c * cs < end:
            chunk = get(S.DB_DATA, S.data_key(ino, c))
            if chunk:
                lo = max(offset - c * cs, 0)
                piece = chunk[lo : min(end - c * cs, cs)]
                if len(piece) == n:
                    return bytes(piece)
                if piece:
                    if out is None:
                        out = bytearray(n)  # zeros: the holes and the chunks' unstored tails
                    at = c * cs + lo - offset
                    out[at : at + len(piece)] = piece
            c += 1
        return bytes(n) if out is None else bytes(out)

    def data_runs(self, ino: int, offset: int, file_size: int) -> Iterator[tuple[int, int]]:
        """The data of a file of ``file_size`` bytes as ``(start, end)`` byte runs in offset order, from the
        chunk holding ``offset`` on (lazily: a caller that stops early reads no further chunk).

        A run is a stretch of :data:`~libraryfs.fs.schema.ALLOC_UNIT` (4 KiB) pages of one stored chunk
        that each hold a non-zero byte, cut at ``file_size``; everything else is a hole: missing chunks,
        the pages past a chunk's stored end, and all-zero pages inside a chunk (what a write at an offset
        inside a chunk pads before it). So the runs depend on the content only, not on how it was written,
        and match tmpfs's page-granular map for non-zero writes (tmpfs reports written zeros as data; Linux
        lseek(2) lets a filesystem report either). Cost: one range read of the file's stored chunks, no
        work per hole byte."""
        cs, page = S.CHUNK_SIZE, S.ALLOC_UNIT
        zero = _ZERO_PAGE
        start = S.data_key(ino, max(offset, 0) // cs)
        for k, v in self.kv.range(S.DB_DATA, start, S.u64(ino + 1)):
            base = S.from_u64(k[8:]) * cs
            run = -1
            n = len(v)
            for lo in range(0, n, page):
                hi = min(lo + page, n)
                if v[lo:hi] != zero[: hi - lo]:
                    if run < 0:
                        run = lo
                elif run >= 0:
                    yield from _cut(base + run, base + lo, file_size)
                    run = -1
            if run >= 0:
                yield from _cut(base + run, base + -(-n // page) * page, file_size)

    def seek_data(self, ino: int, offset: int, file_size: int) -> int | None:
        """``lseek(SEEK_DATA)``: the first offset ≥ ``offset`` inside a data run (:meth:`data_runs`), or
        None when there is none before ``file_size`` (the caller's ENXIO)."""
        if offset < 0 or offset >= file_size:
            return None
        for lo, hi in self.data_runs(ino, offset, file_size):
            if hi > offset:
                return max(lo, offset)
        return None

    def seek_hole(self, ino: int, offset: int, file_size: int) -> int | None:
        """``lseek(SEEK_HOLE)``: the first offset ≥ ``offset`` inside a hole, ``file_size`` when the data
        reaches the end (the implicit hole at end of file), None when ``offset`` is not below ``file_size``
        (the caller's ENXIO). Reads the stored chunks from ``offset`` up to the first hole only."""
        if offset < 0 or offset >= file_size:
            return None
        pos = offset
        for lo, hi in self.data_runs(ino, offset, file_size):
            if hi <= pos:
                continue
            if lo > pos:
                return pos
            pos = hi
        return min(pos, file_size)

    def write_data(self, ino: int, offset: int, data: bytes, file_size: int | None = None) -> int:
        """Write ``data`` at ``offset``, touching only the chunks it covers (the caller updates ``size`` and
        ``blocks``). Returns the change of the file's ``blocks`` (I9). ``file_size``: the size before the
        write, when known: chunks at or past it do not exist (I5), so they are not read.

        A chunk the write covers only in part is read, and its new value is made with **one** copy (a join
        of the old bytes before the write, the written bytes and the old bytes after it, as views of the
        value read; a gap past the chunk's stored end reads as zeros): a write inside a chunk (SQLite's
        24-byte and 4 KiB writes into the 64 KiB chunks of its WAL) copied the chunk three times before
        (two slices, then their concatenation). Issue 18, docs/benchmarks.md "SQLite's WAL commit"."""
        cs = S.CHUNK_SIZE
        pos = 0
        n_total = len(data)
        kv = self.kv
        delta = 0  # in 4 KiB pages until the end (S.chunk_blocks, inlined: this is every write)
        while pos < n_total:
            abs_off = offset + pos
            c, coff = divmod(abs_off, cs)
            n = min(cs - coff, n_total - pos)
            key = S.data_key(ino, c)
            if file_size is not None and c * cs >= file_size:
                old = b""
            else:
                old = kv.get(S.DB_DATA, key) or b""
            n_old = len(old)
            piece = data if n == n_total else data[pos : pos + n]
            end = coff + n
            if coff == 0 and end >= n_old:  # every stored byte of the chunk is overwritten
                new = piece
            elif coff == n_old:  # an append to the chunk
                new = old + piece
            elif coff > n_old:  # past the stored end: the old bytes, zeros up to the write, the write
                new = b"".join((old, bytes(coff - n_old), piece))
            elif end >= n_old:  # over the stored end
                new = b"".join((memoryview(old)[:coff], piece))
            else:  # inside the stored bytes
                view = memoryview(old)
                new = b"".join((view[:coff], piece, view[end:]))
            kv.put(S.DB_DATA, key, new)
            delta += ((len(new) + 4095) >> 12) - ((n_old + 4095) >> 12)
            pos += n
        return delta * 8

    def truncate_data(self, ino: int, old_size: int, new_size: int) -> int | None:
        """Drop data past ``new_size`` (growing needs nothing: holes read as zeros). Returns the change of
        the file's ``blocks`` (I9), or None when no data is left (``blocks`` is then 0)."""
        if new_size >= old_size:
            return 0
        if new_size == 0:
            self.kv.delete_range(S.DB_DATA, S.data_key(ino, 0), S.u64(ino + 1))
            return None
        cs = S.CHUNK_SIZE
        blocks = S.chunk_blocks
        keep = -(-new_size // cs)  # chunks [0, keep) may remain
        start, end = S.data_key(ino, keep), S.u64(ino + 1)
        delta = -sum(blocks(len(v)) for _k, v in self.kv.range(S.DB_DATA, start, end))
        self.kv.delete_range(S.DB_DATA, start, end)
        if new_size % cs:
            key = S.data_key(ino, new_size // cs)
            old = self.kv.get(S.DB_DATA, key)
            if old is not None and len(old) > new_size % cs:
                self.kv.put(S.DB_DATA, key, old[: new_size % cs])
                delta += blocks(new_size % cs) - blocks(len(old))
        return delta

    def punch_data(self, ino: int, offset: int, end: int) -> int:
        """Make bytes ``[offset, end)`` a hole (``FALLOC_FL_PUNCH_HOLE``): chunks inside the range are
        dropped, the covered part of a chunk at either edge reads as zeros (a chunk is cut short where the
        hole reaches its stored end). Returns the change of the file's ``blocks`` (I9)."""
        cs = S.CHUNK_SIZE
        blocks = S.chunk_blocks
        kv = self.kv
        delta = 0
        first, last = offset // cs, (end - 1) // cs
        for k, v in list(kv.range(S.DB_DATA, S.data_key(ino, first), S.data_key(ino, last + 1))):
            base = S.from_u64(k[8:16]) * cs
            lo, hi = max(offset - base, 0), min(end - base, cs)
            if lo == 0 and hi >= len(v):
                kv.delete(S.DB_DATA, k)
                new = b""
            elif hi >= len(v):
                new = v[:lo]
            else:
                new = v[:lo] + bytes(hi - lo) + v[hi:]
            if new:
                kv.put(S.DB_DATA, k, new)
            delta += blocks(len(new)) - blocks(len(v))
        return delta

    # -- xattrs ----------------------------------------------------------------------------------------
    def getxattr(self, ino: int, name: bytes) -> bytes | None:
        """Value of an extended attribute or ``None``."""
        return self.kv.get(S.DB_XATTRS, S.u64(ino) + name)

    def setxattr(self, ino: int, name: bytes, value: bytes) -> None:
        """Set an extended attribute."""
        self.kv.put(S.DB_XATTRS, S.u64(ino) + name, value)

    def delxattr(self, ino: int, name: bytes) -> bool:
        """Remove an extended attribute; False if absent."""
        return self.kv.delete(S.DB_XATTRS, S.u64(ino) + name)

    def listxattr(self, ino: int) -> list[bytes]:
        """Names of the extended attributes of ``ino``."""
        return [k[8:] for k, _ in self.kv.range(S.DB_XATTRS, S.u64(ino), S.u64(ino + 1), keys_only=True)]

    # -- meta and names (the indexer's records) --------------------------------------------------------
    def meta(self, ino: int) -> S.EntryMeta | S.SectionMeta | None:
        """The indexer's record of ``ino`` (None if none); :class:`Corrupt` if undecodable."""
        raw = self.kv.get(S.DB_META, S.u64(ino))
        return None if raw is None else S.decode_meta(raw)

    def entry_meta(self, ino: int) -> S.EntryMeta | None:
        """The entry record of a file or symlink; None if absent (or, in a damaged store, a section's)."""
        m = self.meta(ino)
        return m if isinstance(m, S.EntryMeta) else None

    def section_meta(self, ino: int) -> S.SectionMeta | None:
        """The section record of a directory; None if absent (or, in a damaged store, an entry's)."""
        m = self.meta(ino)
        return m if isinstance(m, S.SectionMeta) else None

    def put_meta(self, ino: int, rec: S.EntryMeta | S.SectionMeta) -> None:
        """Store the indexer's record of ``ino``."""
        self.kv.put(S.DB_META, S.u64(ino), rec.encode())

    def del_meta(self, ino: int) -> bool:
        """Remove the indexer's record of ``ino``; False if absent."""
        return self.kv.delete(S.DB_META, S.u64(ino))

    def iter_meta(self) -> Iterator[tuple[int, S.EntryMeta | S.SectionMeta]]:
        """``(ino, record)`` of every meta record in inode order (:class:`Corrupt` at an undecodable one)."""
        for k, v in self.kv.range(S.DB_META):
            yield S.from_u64(k), S.decode_meta(v)

    def put_name(self, name: bytes, ino: int, parent: int) -> None:
        """Index the link ``name`` of ``ino`` in directory ``parent`` for ``find``."""
        self.kv.put(S.DB_NAMES, S.names_key(name, ino, parent), S.u64(parent) + name)

    def del_name(self, name: bytes, ino: int, parent: int) -> None:
        """Forget the link ``name`` of ``ino`` in directory ``parent`` in the ``names`` table."""
        self.kv.delete(S.DB_NAMES, S.names_key(name, ino, parent))

    def iter_names(self, name: bytes) -> Iterator[tuple[int, int, bytes]]:
        """``(ino, parent, original name)`` of the indexed names that casefold to ``name``'s fold (rows of
        both formats: the parent is read from the value)."""
        prefix = S.name_fold(name) + b"\0"
        for k, v in self.kv.prefix(S.DB_NAMES, prefix):
            yield S.from_u64(k[len(prefix) :]), S.from_u64(v), v[8:]

    # -- toc, config, journal ---------------------------------------------------------------------------
    def toc_page(self, dir_ino: int, page: int) -> bytes | None:
        """Rendered TOC page (page 0 = INDEX.md) or ``None``."""
        return self.kv.get(S.DB_TOC, S.toc_key(dir_ino, page))

    def put_toc_pages(self, dir_ino: int, pages: list[bytes]) -> None:
        """Replace all TOC pages of a directory."""
        self.kv.delete_range(S.DB_TOC, S.u64(dir_ino), S.u64(dir_ino + 1))
        for i, p in enumerate(pages):
            self.kv.put(S.DB_TOC, S.toc_key(dir_ino, i), p)

    def toc_page_count(self, dir_ino: int) -> int:
        """Number of TOC pages stored for a directory."""
        return sum(1 for _ in self.kv.range(S.DB_TOC, S.u64(dir_ino), S.u64(dir_ino + 1), keys_only=True))

    def cfg(self, key: bytes) -> bytes | None:
        """Raw config value (``key``: a ``CFG_*`` constant of :mod:`libraryfs.fs.schema`)."""
        return self.kv.get(S.DB_CONFIG, key)

    def put_cfg(self, key: bytes, value: bytes) -> None:
        """Set a config value."""
        self.kv.put(S.DB_CONFIG, key, value)

    def cfg_int(self, key: bytes, default: int = 0) -> int:
        """A u64 config value."""
        raw = self.cfg(key)
        return S.from_u64(raw) if raw else default

    def cfg_json(self, key: bytes) -> dict:
        """A JSON config record (``CFG_INDEXER_STATUS``, ``CFG_MOUNT_STATUS``); ``{}`` when absent or null."""
        value = S.loads(self.cfg(key), {})
        return value if isinstance(value, dict) else {}

    def _ino_set(self, key: bytes) -> set[int]:
        """A config record holding a sorted JSON list of inode numbers, as a set; empty when absent or
        undecodable."""
        try:
            value = S.loads(self.cfg(key), [])
        except ValueError:
            return set()
        return {int(i) for i in value if isinstance(i, int)} if isinstance(value, list) else set()

    def _put_ino_set(self, key: bytes, inos: set[int]) -> None:
        """Store :meth:`_ino_set` ``key`` (the key is removed when ``inos`` is empty)."""
        if inos:
            self.put_cfg(key, S.dumps(sorted(inos)))
        elif self.cfg(key) is not None:
            self.kv.delete(S.DB_CONFIG, key)

    def toc_pending(self) -> set[int]:
        """Directories the indexer owes a TOC without a journal record naming them (``CFG_TOC_PENDING``:
        deferred until they settle, or queued by ``check --repair``); empty when absent or undecodable."""
        return self._ino_set(S.CFG_TOC_PENDING)

    def put_toc_pending(self, inos: set[int]) -> None:
        """Store :meth:`toc_pending` (the key is removed when ``inos`` is empty)."""
        self._put_ino_set(S.CFG_TOC_PENDING, inos)

    def orphans(self) -> set[int]:
        """Inodes registered as orphans awaiting a mount's last close (``CFG_ORPHANS``: left with nlink 0 by a
        view that does not know the mount's open handles); empty when absent or undecodable."""
        return self._ino_set(S.CFG_ORPHANS)

    def put_orphans(self, inos: set[int]) -> None:
        """Store :meth:`orphans` (the key is removed when ``inos`` is empty)."""
        self._put_ino_set(S.CFG_ORPHANS, inos)

    def journal(self, rec: S.JournalRecord) -> int:
        """Append a journal record; returns its sequence number."""
        seq = self._journal_last()
        seq = seq + 1 if seq is not None else max(1, self.cfg_int(S.CFG_CURSOR) + 1)
        self.kv.put(S.DB_JOURNAL, S.u64(seq), rec.pack(), append=True)
        return seq

    def _journal_last(self) -> int | None:
        for k, _ in self.kv.range(S.DB_JOURNAL, reverse=True, limit=1, keys_only=True):
            return S.from_u64(k)
        return None

    def journal_tail(self) -> int:
        """Sequence number of the last journal record (0 if the journal is empty)."""
        seq = self._journal_last()
        return seq if seq is not None else self.cfg_int(S.CFG_CURSOR)

    def journal_since(self, seq: int, limit: int = 10_000) -> list[tuple[int, S.JournalRecord]]:
        """Up to ``limit`` records with sequence number ``> seq``."""
        return [
            (S.from_u64(k), S.JournalRecord.unpack(v))
            for k, v in self.kv.range(S.DB_JOURNAL, S.u64(seq + 1), limit=limit)
        ]

    def journal_trim(self, upto: int) -> None:
        """Delete records with sequence number ``≤ upto`` (already consumed)."""
        self.kv.delete_range(S.DB_JOURNAL, b"", S.u64(upto + 1))

    def count(self, table: bytes) -> int:
        """Number of records in a table."""
        return self.kv.count(table)


class TxnHook(Protocol):
    """Writes a thread owes the store before its next transaction (:attr:`Store.before_txn`; the view's
    deferred creates, :class:`libraryfs.fs.pending.PendingCreates`)."""

    def before_read(self) -> None:
        """Commit what is owed (its own write transaction): a read transaction of the thread begins next."""

    def in_write(self, t: Txn) -> None:
        """Write what is owed in ``t``, the thread's next write transaction, before its own writes (may run
        again when the transaction is retried)."""

    def committed(self) -> None:
        """The transaction that :meth:`in_write` wrote into has committed: nothing of that is owed any more
        (the hook registers itself again in :attr:`Store.before_txn` if something still is)."""


class Store:
    """An open library store: a backend plus the schema check and migrations of an open.

    ``Store(libdir)`` opens an existing library (read-write: an older schema is migrated first, see
    :mod:`libraryfs.fs.migrations`; ``readonly``: served as it is when every pending step allows that);
    :meth:`create` initialises one. ``backend``: an open backend to use instead of the library's LMDB store
    (opened with the same ``readonly``); ``verify``: walk every page of the LMDB store before opening it
    (default: when opened read-write, so that no writer writes into a damaged store; ``status`` asks for it
    read-only). Raises :class:`LibraryMissing` when ``libdir`` holds no library,
    :class:`~libraryfs.errors.Damaged` when its store is damaged, :class:`~libraryfs.errors.SchemaMismatch`
    when its schema cannot be served. Open it *after* any fork (py-lmdb refuses an environment inherited over fork).
    """

    def __init__(
        self,
        libdir: str | os.PathLike[str],
        *,
        readonly: bool = False,
        map_size: int | None = None,
        backend: Backend | None = None,
        verify: bool | None = None,
        _new: bool = False,
    ) -> None:
        self.libdir = os.path.abspath(os.fspath(libdir))
        self.readonly = readonly
        if backend is None:
            backend = open_backend(self.libdir, readonly=readonly, map_size=map_size, verify=verify)
        self.backend: Backend = backend
        #: write transactions this process committed, and how many of them the last sync covered (-1: the
        #: first sync always syncs: an earlier process may have left unsynced commits)
        self.write_seq = 0
        self.synced_seq = -1
        self._seq_lock = threading.Lock()
        #: the ``write_seq`` at which each sync now running began (:meth:`sync`: a call whose commits one of
        #: them covers waits for it instead of starting its own)
        self._syncing: list[int] = []
        self._synced = threading.Condition(self._seq_lock)
        #: ``(mine, hook)``: work owed the store by the threads for which ``mine()`` is True (the view's
        #: deferred creates, :mod:`libraryfs.fs.pending`: the threads serving FUSE requests), done before any
        #: transaction such a thread begins so that every transaction sees what earlier requests did
        #: (:class:`TxnHook`); None: nothing owed
        self.before_txn: tuple[Callable[[], bool], TxnHook] | None = None
        self.schema_version = S.SCHEMA_VERSION if _new else self._open_schema()

    def _open_schema(self) -> int:
        """The store's schema version after the open's migrations (:mod:`libraryfs.fs.migrations`)."""
        try:
            with self.read() as t:
                raw = t.cfg(S.CFG_SCHEMA_VERSION)
        except StoreError as e:
            self.backend.close()
            raise Damaged(
                f"the library's store is damaged: {self.libdir}: {e}; "
                f"run `libraryfs check` or restore it from a backup"
            ) from e
        try:
            version = None if raw is None else S.from_u64(raw)
            if version == S.SCHEMA_VERSION:  # what migrations.on_open returns for a current store
                return version
            from libraryfs.fs import migrations  # here: a current store's open (every command) needs none

            return migrations.on_open(self, version)
        except BaseException:
            self.backend.close()
            raise

    # -- lifecycle --------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        libdir: str | os.PathLike[str],
        settings: dict | None = None,
        map_size: int | None = None,
        backend: Backend | None = None,
        url: str | None = None,
    ) -> Store:
        """Initialise a new library in ``libdir`` (created with mode 0700) at :data:`SCHEMA_VERSION` and
        return it open; ``backend``: an empty, writable backend to initialise instead of a new LMDB store;
        ``url``: put the store at that URL (an empty ``etcd://…/PREFIX``) and record it in ``config.toml``.

        Raises ``FileExistsError`` if a library is already there (in ``libdir`` or at ``url``),
        :class:`~libraryfs.errors.NoSpace` if the disk has less than
        :data:`~libraryfs.fs.lmdb_backend.MIN_FREE_TO_CREATE` bytes free, :class:`~libraryfs.errors.Unavailable`.
        """
        undo = None
        if backend is None and url is not None:
            backend = create_remote(libdir, url)
        elif backend is None:
            undo = _undo_new_store(libdir)
            try:
                backend = lmdb_backend.LmdbBackend.create(libdir, map_size=map_size)
            except BaseException:
                undo()
                raise
        else:  # the store lives elsewhere; the library directory still holds config, locks and derived files
            make_libdir(libdir)
        try:
            return cls._initialise(libdir, backend, settings, url)
        except BaseException:
            if undo is not None:  # e.g. the disk filled during the first commit: nothing half-made is left
                with contextlib.suppress(Exception):
                    backend.close()
                undo()
            raise

    @classmethod
    def _initialise(
        cls, libdir: str | os.PathLike[str], backend: Backend, settings: dict | None, url: str | None
    ) -> Store:
        """Write a new library's root and config into the empty ``backend`` (:meth:`create`'s second half)."""
        st = cls(libdir, backend=backend, _new=True)
        now = now_ns()

        def init(t: Txn) -> None:
            """The write transaction: the root directory inode (ino 1, mode 0755, nlink 2, the caller's
            uid/gid, times ``now`` in ns) and the config: next inode 2, schema version, clean flag, creation
            time, settings, the format of the (empty) ``names`` table."""
            root = S.Inode(S.ROOT_INO, S.S_IFDIR | 0o755, os.getuid(), os.getgid(), 2, 0, now, now, now)
            t.put_inode(root)
            t.put_cfg(S.CFG_NEXT_INO, S.u64(2))
            t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(S.SCHEMA_VERSION))
            t.put_cfg(S.CFG_CLEAN, b"1")
            t.put_cfg(S.CFG_CREATED, S.u64(now))
            t.put_cfg(S.CFG_SETTINGS, S.dumps(settings or {}))
            t.put_cfg(S.CFG_NAMES_FORMAT, b"%d" % S.NAMES_FORMAT)

        st.run_write(init)
        st.sync()
        if url is not None:
            write_store_url(libdir, url)  # last: a library directory never names a store not initialised
        return st

    def close(self) -> None:
        """Flush (when writable) and close the store."""
        self.backend.close()

    def sync(self) -> bool:
        """Force the transactions committed before the call to durable storage (LMDB: fdatasync of the data
        file, not under the store lock); a group commit (issue 18).

        LMDB can only sync the whole data file, so one sync covers every commit made before it began. A call
        returns without a sync of its own when this process has committed nothing since the last sync began
        (the first call always syncs: an earlier process may have left unsynced commits), or when a sync
        already running began after this call's commits: it waits for that one. Otherwise it starts one at
        once, beside any running sync (the kernel merges concurrent fdatasyncs of one file; waiting for a
        running sync first would only serialise them). So concurrent ``fsync`` requests share syncs instead of
        each paying its own. Returns whether this call ran a sync. Raises what the backend's sync raises
        (OSError); a caller waiting for that sync then tries again."""
        seq = self.write_seq  # commits counted before the call; a sync that begins after now covers them
        with self._synced:
            while self.synced_seq < seq and self._syncing and max(self._syncing) >= seq:
                self._synced.wait()
            if self.synced_seq >= seq:
                return False
            start = self.write_seq  # this sync covers every commit counted until it begins
            self._syncing.append(start)
        synced = False
        try:
            self.backend.sync()
            synced = True
        finally:
            with self._synced:
                self._syncing.remove(start)
                if synced:
                    self.synced_seq = max(self.synced_seq, start)
                self._synced.notify_all()
        return True

    def open_table(self, name: bytes) -> None:
        """Make an extension table known (created if absent unless read-only); see ``schema.EXTENSION_DBS``."""
        self.backend.open_table(name)

    # -- transactions ------------------------------------------------------------------------------------
    def read(self) -> Txn:
        """A read-only :class:`Txn` on a consistent snapshot, as a context manager (``with st.read() as t``).

        One object per request on top of the backend's: this is on every FUSE request."""
        if self.before_txn is not None:
            hook = self._hook_here()
            if hook is not None:
                hook.before_read()
        return Txn(self, None, False, self.backend.read())

    def read_committed(self) -> Txn:
        """:meth:`read` without committing what this thread owes first (:attr:`before_txn`): the snapshot
        lacks it. For a caller that accounts for what is owed itself (a create's checks look at the pending
        creates in memory)."""
        return Txn(self, None, False, self.backend.read())

    def _hook_here(self) -> TxnHook | None:
        """The registered :attr:`before_txn` hook if this thread is one it is for, else None (other threads —
        the mount's sync and watch threads — see the store as committed)."""
        hook = self.before_txn
        return hook[1] if hook is not None and hook[0]() else None

    def run_write(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in one write transaction and commit; returns ``fn``'s result.

        What this thread owes the store (:attr:`before_txn`) is written first in the same transaction and
        commits with it (an exception from ``fn`` aborts both: it stays owed). ``fn`` may run more than once
        (the backend retries after growing its map or a conflict), so it must not have side effects outside
        the transaction. Raises :class:`~libraryfs.errors.NoSpace` when the store cannot grow; any exception
        from ``fn`` aborts the transaction and propagates.
        """
        owed = self.before_txn
        hook = self._hook_here() if owed is not None else None
        if hook is None:
            result = self.backend.run_write(lambda kv: fn(Txn(self, kv, True)))
        else:

            def owed_then_fn(kv: Any) -> T:
                """The hook's writes, then ``fn``'s, in one transaction."""
                t = Txn(self, kv, True)
                hook.in_write(t)
                return fn(t)

            self.before_txn = None  # inside the transaction nothing is owed any more
            try:
                result = self.backend.run_write(owed_then_fn)
            except BaseException:
                self.before_txn = owed
                raise
            hook.committed()
        with self._seq_lock:
            self.write_seq += 1
        return result

    def map_info(self) -> dict:
        """The backend's facts: LMDB ``{"map_size": bytes, "used_bytes": bytes, "page_size": bytes}``."""
        return self.backend.info()

    def settings(self) -> dict:
        """Library settings stored at ``init`` (e.g. ``toc_max_tokens``)."""
        with self.read() as t:
            return S.loads(t.cfg(S.CFG_SETTINGS), {})  # type: ignore[return-value]


def _undo_new_store(libdir: str | os.PathLike[str]) -> Callable[[], None]:
    """A function removing what making a new LMDB store in ``libdir`` adds (the library directory if it did
    not exist, else its ``store/`` directory if that did not), so that a failed ``init`` or ``demo`` — e.g.
    ENOSPC — can be retried instead of being refused as "not empty". Call it before the store is made."""
    libdir = os.path.abspath(os.fspath(libdir))
    new_dir = not os.path.exists(libdir)
    new_store = not os.path.exists(lmdb_backend.store_path(libdir))

    def undo() -> None:
        """Remove what was made (errors ignored: the original error is the one to report)."""
        import shutil  # here: the commands that only read the store need not import it

        if new_dir:
            shutil.rmtree(libdir, ignore_errors=True)
        elif new_store:
            shutil.rmtree(lmdb_backend.store_path(libdir), ignore_errors=True)

    return undo
