"""File data I/O of the view: create/open/read/write/truncate/release/fsync, and orphans.

:class:`FileData` is the one service that moves bytes. A write commits one LMDB transaction and journals
the first write of each handle (later ones are journaled once more at release), so the indexer sees every
changed file without one record per ``write(2)``. Generated files are opened as snapshots (consistent reads)
and every read is charged to the mount's read accounting
(``stats.json``, the read budget: EDQUOT past it).

Page cache (what :meth:`FileData.open` tells the kernel, instead of libfuse's ``auto_cache``): a generated
file is served through the page cache, so a shared ``mmap`` works, and never keeps it (each open reads its
own snapshot); it gets ``direct_io`` only for an open whose snapshot size differs from the size the kernel
holds (the kernel would cut reads at that size). A regular file keeps its cached pages when the same path
was last opened at the same inode generation (every data change bumps it, also store-side writes behind the
kernel); otherwise they are dropped at open. Paths are absolute bytes; sizes and offsets bytes; errors
:mod:`libraryfs.errors` classes.

SQLite's logs (:data:`DIRECT_IO_SUFFIXES`: ``DB-wal``, ``DB-journal`` beside a file ``DB``) are opened
with ``direct_io`` (:meth:`FileData.direct_io`; issue 18, docs/benchmarks.md "SQLite's WAL commit").
Through the page cache the kernel (Linux 6.x ``fuse_perform_write``) asks, before every ``write(2)``, for
the ``security.capability`` xattr (``file_remove_privs``: one GETXATTR round trip; libfuse 3.14 cannot ask
for ``FUSE_HANDLE_KILLPRIV_V2``, which would let it skip that), and it splits a write that starts inside a page
it does not hold (``fuse_fill_write_pages`` ends a request at a partly written page that is not up to date)
— SQLite's WAL frames (24-byte header, then the page at offset 24) and journal records are never aligned,
so each of their page writes was two WRITE requests, two store transactions. With ``direct_io`` each
``write(2)`` is one WRITE and nothing else (the server clears the set-id bits itself, as it does on every
write): per WAL commit 2.2 instead of 3.2 transactions (a third fewer LMDB pages to flush at its
``fdatasync``) and 3.2 instead of 6.4 requests. What it costs: those files are read through the server on
every read (SQLite reads them only to recover, or for a page another connection committed), and a shared
``mmap`` of them is ENODEV (SQLite maps neither; the ``-shm`` file it maps keeps the page cache).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat as _stat
import time

from libraryfs.errors import (
    AccessDenied,
    BadHandle,
    Exists,
    FileTooBig,
    InvalidArgument,
    IsADir,
    LibraryError,
    NoSpace,
    NoSuchOffset,
    NotFound,
    NotSupported,
)
from libraryfs.fs import schema as S
from libraryfs.fs.generated import INDEX_NAME
from libraryfs.fs.handles import Handle
from libraryfs.fs.nameops import add_child, check_new_name, new_inode, touch_dir
from libraryfs.fs.nodes import Kind
from libraryfs.fs.pending import INO_BLOCK, PendingCreate, PendingCreates
from libraryfs.fs.resolve import Resolver, ViewService, require_writable
from libraryfs.fs.stats import ReadAccounting
from libraryfs.fs.store import Store, Txn, now_ns
from libraryfs.fs.virtual import set_index_claim
from libraryfs.shown import escape_controls, show_name

#: Name endings of the logs SQLite writes beside a database ``DB``: its write-ahead log ``DB-wal`` and its
#: rollback journal ``DB-journal``. Every open of such a name beside a file ``DB`` is served with
#: ``direct_io`` (:meth:`FileData.direct_io`, module doc).
DIRECT_IO_SUFFIXES = (b"-wal", b"-journal")
FALLOC_FL_KEEP_SIZE = 0x01  #: fallocate(2): do not change the file size
FALLOC_FL_PUNCH_HOLE = 0x02  #: fallocate(2): deallocate the range (with KEEP_SIZE only)
log = logging.getLogger("libraryfs.view")
CACHED_PATHS_MAX = 100_000  #: paths whose last-open generation is remembered (page cache decisions)


def truncate_node(t: Txn, node: S.Inode, length: int, parent: int, name: bytes) -> None:
    """Set ``node``'s size to ``length`` bytes in write transaction ``t`` (growing makes a hole): mtime,
    ctime, one more generation, and a WRITE journal record naming ``parent``/``name`` (0/``b""``: none)."""
    delta = t.truncate_data(node.ino, node.size, length)
    node.blocks = 0 if delta is None else node.blocks + delta
    now = now_ns()
    node.size = length
    node.mtime_ns = node.ctime_ns = now
    node.generation += 1
    t.put_inode(node)
    t.journal(S.JournalRecord(S.OP_WRITE, node.ino, parent, name, now))


def log_base(path: bytes | None) -> bytes | None:
    """The path of the database whose SQLite log ``path`` would be: ``path`` without the
    :data:`DIRECT_IO_SUFFIXES` ending it has, or None when it has none (module doc)."""
    if path is not None:
        for suffix in DIRECT_IO_SUFFIXES:
            base = path[: -len(suffix)]
            if path.endswith(suffix) and base and not base.endswith(b"/"):  # not a bare "/-wal"
                return base
    return None


class FileData(ViewService):
    """Open files and their bytes over the store (module doc).

    State: :class:`~libraryfs.fs.resolve.ViewService`'s, and ``accounting``, which charges every read
    (``stats.json``, the read budget).
    """

    def __init__(
        self, store: Store, resolver: Resolver, accounting: ReadAccounting, *, read_only: bool = False
    ) -> None:
        super().__init__(store, resolver, read_only=read_only)
        self.accounting = accounting
        #: path → ``(ino, generation)`` at its last open: the data the kernel may have cached for that name
        self.cached_gen: dict[bytes, tuple[int, int]] = {}
        #: new files not yet in the store, by handle (:mod:`libraryfs.fs.pending`)
        self.pending = PendingCreates(store)
        #: the orphans the last :meth:`reclaim_orphans` left registered (due at the next call)
        self._orphans_seen: frozenset[int] = frozenset()

    def _keep_cache(self, path: bytes, node: S.Inode) -> bool:
        """Whether the kernel's cached pages of ``path`` are current (module doc), and remember this open."""
        seen = (node.ino, node.generation)
        keep = self.cached_gen.get(path) == seen
        if not keep:
            if len(self.cached_gen) >= CACHED_PATHS_MAX:
                self.cached_gen.clear()  # forgetting only drops pages that might have been kept
            self.cached_gen[path] = seen
        return keep

    def create(self, path: bytes, mode: int, flags: int, uid: int, gid: int) -> int:
        """``open(O_CREAT)``: create (or, without O_EXCL, open) a regular file; returns a handle.

        Raises Exists (O_EXCL), IsADir, NotFound/NotADir (parent), AccessDenied (a generated name), EROFS.
        """
        require_writable(self.read_only)
        fh = self._create_deferred(path, mode, flags, uid, gid)
        if fh is not None:
            return fh
        index_dir = 0
        block, refill = 0, self.pending.inos.empty()

        def fn(t: Txn) -> int:
            """The write transaction: the inode number of the existing file ``name`` under the parent
            (truncated under O_TRUNC), else of a new regular file added there with ``mode & 0o7777``; sets
            ``index_dir`` for an ``INDEX.md``. Raises Exists (EEXIST, O_EXCL), IsADir (EISDIR), NotFound
            (ENOENT), NotADir, AccessDenied (EACCES, a generated name), as ``open(2)`` with O_CREAT."""
            nonlocal index_dir, block
            pino, pnode, name = self.resolver.parent_and_name(t, path)
            index_dir = pino if name == INDEX_NAME else 0
            existing = t.lookup(pino, name)
            if existing is not None:
                if flags & os.O_EXCL:
                    raise Exists("file exists")
                node = t.inode(existing)
                if node is None:
                    raise NotFound("dangling dirent")
                if node.is_dir:
                    raise IsADir("is a directory")
                if flags & os.O_TRUNC and node.size:
                    truncate_node(t, node, 0, pino, name)
                return existing
            check_new_name(t, name, pino, self.virtual)
            if refill:  # the next creates' inode numbers (:mod:`libraryfs.fs.pending`)
                block = t.alloc_ino(INO_BLOCK)
            return add_child(t, pino, pnode, name, S.S_IFREG | (mode & 0o7777), uid, gid)

        ino = self.store.run_write(fn)
        if block:
            self.pending.inos.refill(block, INO_BLOCK)
        return self._open_real(ino, flags, index_dir)

    def _create_deferred(self, path: bytes, mode: int, flags: int, uid: int, gid: int) -> int | None:
        """A handle on a new file held in memory until its first write (:mod:`libraryfs.fs.pending`), or None
        when the create must be done in a write transaction now: the name exists (or is ``INDEX.md``, or a
        pending create's), no reserved inode number is left, the store is shared with other mounts, or the
        path does not resolve while other creates are pending. Raises what :meth:`create`
        raises for a new name."""
        if not self.pending.enabled:
            return None
        # other pending creates are not in this snapshot: they are files, so no parent is among them, and
        # every other outcome (the name is theirs, or an error: ENOTDIR for a path through one) is left to
        # create's write transaction (None), which commits them first
        with self.store.read_committed() as t:
            try:
                pino, pnode, name = self.resolver.parent_and_name(t, path)
            except LibraryError:
                if self.pending.by_fh:
                    return None
                raise
            if name == INDEX_NAME or t.lookup(pino, name) is not None or self.pending.has_name(pino, name):
                return None
            check_new_name(t, name, pino, self.virtual)
        ino = self.pending.inos.take()
        if ino is None:
            return None
        now = now_ns()
        node = new_inode(ino, pnode, S.S_IFREG | (mode & 0o7777), uid, gid, now)
        fh = self.handles.open_file(ino, flags)
        self.pending.add(PendingCreate(fh, path, pino, name, node, now))
        return fh

    def _open_real(self, ino: int, flags: int, index_dir: int) -> int:
        """A handle on stored inode ``ino``; ``index_dir`` (or 0) is the directory whose ``INDEX.md`` it is
        (checked at release: a copy of the generated page is absorbed)."""
        fh = self.handles.open_file(ino, flags)
        h = self.handles.file(fh)
        assert h is not None
        h.index_dir = index_dir
        return fh

    def open(self, path: bytes, flags: int) -> tuple[int, bool]:
        """Open a file; returns ``(handle, direct_io)``; :meth:`keep_cache` tells whether the kernel may keep
        its cached pages (module doc). ``direct_io`` is True for a generated file whose size changed since
        the kernel last asked, and for SQLite's logs (:meth:`direct_io`).

        O_TRUNC is applied here (libfuse3 passes it with atomic_o_trunc). Writing a generated file raises
        AccessDenied; opening a directory for writing raises IsADir. While hidden names exist, under the
        handle table's lock: the path may be one the mount's background thread is retiring
        (:meth:`expire_hidden`), whose file must not be freed under the new handle.
        """
        if not self.handles.hidden:
            return self._open(path, flags)
        with self.handles.lock:
            return self._open(path, flags)

    def _open(self, path: bytes, flags: int) -> tuple[int, bool]:
        """:meth:`open` itself."""
        acc = flags & os.O_ACCMODE
        with self.store.read() as t:
            r = self.resolver.resolve_seen(t, path)  # the kernel's LOOKUP of a cold name came just before
            sid = t.snapshot()
            writes = acc != os.O_RDONLY or flags & os.O_TRUNC
            # a stored directory's INDEX.md becomes the user's file; the catalogue's and the subject index's
            # page 0 belong to no stored directory: read-only as every other generated file (EACCES below)
            if r.kind is Kind.TOC and writes and not self.read_only and r.ino not in S.PSEUDO_INOS:
                return self._open_index_for_write(r.ino, flags), True
            if not r.is_real:
                snap = self.virtual.open(t, r, flags)
                fh = self.handles.open_snapshot(
                    snap.content, flags, is_toc=snap.is_toc, toc_tokens=snap.toc_tokens, vkey=snap.key
                )
                # control files (status.json, stats.json, …) change between any two reads: always direct_io, so
                # a read is never cut at a size the kernel cached a moment earlier (a torn status.json); TOC pages
                # go through the page cache (shared mmap works) unless their size changed since the kernel asked
                return fh, not snap.is_toc or not self.virtual.size_is_known(snap)
            node = r.node
            assert node is not None
            if node.is_dir and acc != os.O_RDONLY:
                raise IsADir("is a directory")
            direct = node.is_reg and self._is_log(t, path)
        if acc != os.O_RDONLY or flags & os.O_TRUNC:
            require_writable(self.read_only)
        if flags & os.O_TRUNC and acc != os.O_RDONLY and node.is_reg and node.size:
            ino = node.ino

            def fn(t: Txn) -> S.Inode | None:
                """The write transaction of O_TRUNC: truncate inode ``ino`` to 0 bytes; returns it after the
                change, or None if it is gone."""
                n = t.inode(ino)
                if n is not None:
                    truncate_node(t, n, 0, 0, b"")
                return n

            node = self.store.run_write(fn) or node
            sid = None  # a commit since: the snapshot's record is not the file's any more
        # a linked file: its release needs no read unless this process writes meanwhile (nothing unlinks it)
        seq = self.store.write_seq if node.nlink > 0 else -1
        fh = self.handles.open_file(node.ino, flags, not direct and self._keep_cache(path, node), seq)
        if sid is not None:
            h = self.handles.file(fh)
            assert h is not None
            h.seen = (sid, node)
        return fh, direct

    def direct_io(self, path: bytes | None) -> bool:
        """Whether opens of ``path`` are served with ``direct_io``: it is SQLite's log of a database beside
        it (:meth:`_is_log`; module doc). Reads the store as committed (a pending create stays pending)."""
        if log_base(path) is None:
            return False
        with self.store.read_committed() as t:
            return self._is_log(t, path)

    def _is_log(self, t: Txn, path: bytes | None) -> bool:
        """Whether ``path``'s name is a database's name plus ``-wal`` or ``-journal`` (SQLite's logs) and that
        database is in the same directory (stored, or a pending create) — so that a file of the user's named
        ``travel-journal`` keeps the page cache."""
        base = log_base(path)
        if base is None:
            return False
        try:
            pino, _pnode, name = self.resolver.parent_and_name(t, base)
        except LibraryError:
            return False
        return t.lookup(pino, name) is not None or self.pending.has_name(pino, name)

    def keep_cache(self, fh: int) -> bool:
        """Whether the kernel may keep its cached pages of the file opened as ``fh`` (FOPEN_KEEP_CACHE)."""
        h = self.handles.file(fh)
        return h is not None and h.keep_cache

    def _open_index_for_write(self, dir_ino: int, flags: int) -> int:
        """``open`` of the generated ``INDEX.md`` for writing (``echo … > INDEX.md``, ``>>``, ``cp x
        INDEX.md``): the user's own ``INDEX.md`` takes the name, as a stored file holding the generated
        bytes (none with O_TRUNC), owned by the directory's owner, mode 0644. Served with ``direct_io``:
        the kernel's inode for the name was the generated file's."""

        def fn(t: Txn) -> int:
            """The write transaction: the inode number of the stored ``INDEX.md`` of ``dir_ino``, created if
            absent with the generated page 0's bytes (none under O_TRUNC) and ``blocks`` from its chunks;
            raises NotFound (ENOENT) if the directory is gone."""
            existing = t.lookup(dir_ino, INDEX_NAME)
            if existing is not None:  # created meanwhile
                return existing
            pnode = t.inode(dir_ino)
            if pnode is None:
                raise NotFound("no such directory")
            content = b"" if flags & os.O_TRUNC else self.virtual.toc.stored(t, dir_ino, 0)
            ino = add_child(t, dir_ino, pnode, INDEX_NAME, S.S_IFREG | 0o644, pnode.uid, pnode.gid)
            if content:
                node = t.inode(ino)
                assert node is not None
                node.blocks += t.write_data(ino, 0, content, 0)  # st_blocks from the chunks written (I9)
                node.size = len(content)
                t.put_inode(node)
            return ino

        require_writable(self.read_only)
        ino = self.store.run_write(fn)
        return self._open_real(ino, flags, dir_ino)

    def read(self, fh: int, size: int, offset: int, pid: int = 0) -> bytes:
        """Up to ``size`` bytes at ``offset`` (short at EOF). Counts the read for ``pid`` (stats.json).

        Raises BadHandle, IsADir (not a regular file), QuotaExceeded (EDQUOT: the read budget is spent).
        """
        h = self.handles.file(fh)
        if h is None:
            raise BadHandle("bad file handle")
        if h.virtual is not None:
            return self._read_snapshot(h, size, offset, pid)
        with self.store.read() as t:
            seen = h.seen
            # the record open read, if nothing was committed since (a read right after the open)
            node = seen[1] if seen is not None and seen[0] == t.snapshot() else t.inode(h.ino)
            if node is None:
                raise BadHandle("file vanished")
            if node.is_lnk or node.is_dir:
                raise IsADir("not a regular file")
            data = t.read_data(h.ino, offset, size, node.size)
            if data:
                self.accounting.charge_entry(t, h.ino, node.size, len(data), pid, first=not h.read_any)
                h.read_any = True
        return data

    def seek(self, fh: int, offset: int, whence: int) -> int:
        """``lseek(2)`` SEEK_DATA / SEEK_HOLE (the kernel answers SEEK_SET/CUR/END itself): the offset of
        the next data or hole at or after ``offset`` from the file's chunk map (:meth:`Txn.data_runs
        <libraryfs.fs.store.Txn.data_runs>`); SEEK_HOLE gives the size when only data follows (the implicit
        hole at end of file). A generated file is all data. Raises NoSuchOffset (ENXIO: ``offset`` < 0 or
        ≥ the size, or SEEK_DATA with no data after ``offset``; POSIX.1-2024 lseek), InvalidArgument
        (EINVAL: another ``whence``), BadHandle, IsADir (not a regular file)."""
        if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
            raise InvalidArgument("lseek whence not SEEK_DATA or SEEK_HOLE")
        h = self.handles.file(fh)
        if h is None:
            raise BadHandle("bad file handle")
        if h.virtual is not None:
            size = len(h.virtual)
            if offset < 0 or offset >= size:
                raise NoSuchOffset("offset at or past the end of file")
            return offset if whence == os.SEEK_DATA else size
        with self.store.read() as t:
            node = t.inode(h.ino)
            if node is None:
                raise BadHandle("file vanished")
            if not node.is_reg:
                raise IsADir("not a regular file")
            seek = t.seek_data if whence == os.SEEK_DATA else t.seek_hole
            pos = seek(h.ino, offset, node.size)
        if pos is None:
            raise NoSuchOffset("no data at or after the offset" if offset < node.size else "offset past EOF")
        return pos

    def _read_snapshot(self, h: Handle, size: int, offset: int, pid: int) -> bytes:
        """Read a generated file's snapshot; the first read of a TOC page is charged as a TOC page read."""
        assert h.virtual is not None
        data = h.virtual[offset : offset + size]
        if h.is_toc and not h.read_any and data:
            h.read_any = True
            self.accounting.charge_toc(pid, len(data), h.toc_tokens)
        elif data:
            self.accounting.count_bytes(pid, len(data))
        return data

    def write(self, fh: int, data: bytes, offset: int) -> int:
        """Write at ``offset`` (at the store's end of file when the handle has O_APPEND); returns bytes.

        Raises BadHandle (unknown or read-only handle), AccessDenied (generated file), FileTooBig, EROFS.
        """
        h = self.handles.file(fh)
        if h is None:
            raise BadHandle("bad file handle")
        if h.virtual is not None:
            raise AccessDenied("generated files are read-only")
        if h.flags & os.O_ACCMODE == os.O_RDONLY:
            raise BadHandle("file not open for writing")
        require_writable(self.read_only)
        if fh in self.pending.by_fh:
            off = 0 if h.flags & os.O_APPEND else offset
            if off + len(data) > S.MAX_FILE_SIZE:
                raise FileTooBig("file too large")
            p = self.pending.pop(fh)
            assert p is not None
            try:
                self.pending.commit(p, off, data)  # the create and this write: one transaction
            except NoSpace:
                # as on a local disk, open(O_CREAT) stands and only this write fails: store the empty file
                # (when even that does not fit, NoSpace again and the name is lost: docs/reliability.md)
                self.pending.commit(p)
                h.journaled = True
                h.committed_seq = self.store.write_seq
                raise
            h.journaled = True  # its CREATE record covers these bytes (the indexer reads the file for it)
            h.committed_seq = self.store.write_seq
            return len(data)

        def fn(t: Txn) -> int:
            """The write transaction: write ``data`` at ``offset`` (at the size under O_APPEND), grow the
            size, set mtime/ctime (ns), bump the generation, clear set-id bits (POSIX) and journal the first
            write of the handle; returns the bytes written. Raises BadHandle (EBADF, inode gone), FileTooBig
            (EFBIG, past MAX_FILE_SIZE)."""
            node = t.inode(h.ino)
            if node is None:
                raise BadHandle("file vanished")
            off = node.size if h.flags & os.O_APPEND else offset
            end = off + len(data)
            if end > S.MAX_FILE_SIZE:
                raise FileTooBig("file too large")
            node.blocks += t.write_data(h.ino, off, data, node.size)
            now = now_ns()
            node.size = max(node.size, end)
            node.mtime_ns = node.ctime_ns = now
            node.generation += 1
            if node.mode & (_stat.S_ISUID | _stat.S_ISGID):
                node.mode &= ~(_stat.S_ISUID | _stat.S_ISGID)  # POSIX: writing clears set-id bits
            t.put_inode(node)
            if first:
                t.journal(S.JournalRecord(S.OP_WRITE, h.ino, 0, b"", now))
            return len(data)

        first = not h.journaled  # set after the commit: fn runs again on a conflict (etcd, other mounts)
        n = self.store.run_write(fn)
        h.journaled, h.wrote_after_journal = True, h.wrote_after_journal or not first
        h.committed_seq = self.store.write_seq
        return n

    def _regular(self, t: Txn, path: bytes | None, fh: int | None) -> S.Inode:
        """The regular file at ``path`` or open as ``fh``; IsADir for a directory, InvalidArgument for another
        type."""
        node = self.resolver.node_for(t, path, fh)
        if node.is_dir:
            raise IsADir("is a directory")
        if not node.is_reg:
            raise InvalidArgument("not a regular file")
        return node

    def truncate(self, path: bytes | None, length: int, fh: int | None = None) -> None:
        """Set a file's size (``truncate``/``ftruncate``); growing makes a hole. Raises IsADir, AccessDenied,
        InvalidArgument (negative length, not a regular file), FileTooBig."""
        if length < 0:
            raise InvalidArgument("negative length")
        if length > S.MAX_FILE_SIZE:
            raise FileTooBig("file too large")
        require_writable(self.read_only)

        def fn(t: Txn) -> None:
            """The write transaction: set the regular file's size to ``length`` bytes; raises as
            :meth:`_regular` (EISDIR, EINVAL, EACCES, EBADF, ENOENT)."""
            truncate_node(t, self._regular(t, path, fh), length, 0, b"")

        self.store.run_write(fn)

    def fallocate(self, path: bytes | None, fh: int | None, mode: int, offset: int, length: int) -> None:
        """``fallocate(2)`` on a regular file (``posix_fallocate(3)`` is mode 0).

        Mode 0 extends the size to ``offset + length`` (like ``ftruncate``; the range reads as zeros) and
        ``FALLOC_FL_KEEP_SIZE`` leaves it; both only check that the disk has ``length`` bytes free (ENOSPC
        otherwise) and reserve nothing: the store is copy-on-write (LMDB), so no allocation could guarantee
        a later overwrite its space — OpenZFS does the same. ``FALLOC_FL_PUNCH_HOLE | KEEP_SIZE`` frees the
        range (``st_blocks`` drops). Other modes (collapse, insert, zero range, unshare): NotSupported
        (EOPNOTSUPP). Raises InvalidArgument (offset < 0, length ≤ 0, punch without KEEP_SIZE), FileTooBig,
        IsADir, EROFS.
        """
        punch = mode == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        if mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE):
            raise NotSupported("fallocate mode not supported")
        if offset < 0 or length <= 0 or (mode & FALLOC_FL_PUNCH_HOLE and not punch):
            raise InvalidArgument("bad fallocate range or mode")
        end = offset + length
        if end > S.MAX_FILE_SIZE:
            raise FileTooBig("file too large")
        require_writable(self.read_only)
        if not punch and shutil.disk_usage(self.store.libdir).free < length:
            raise NoSpace("not enough free space to allocate")

        def fn(t: Txn) -> None:
            """The write transaction: punch the hole ``[offset, min(end, size))`` (blocks drop, mtime/ctime,
            generation, a WRITE journal record), or for mode 0 extend the size to ``end`` when beyond it
            (KEEP_SIZE: nothing); raises as :meth:`_regular` (EISDIR, EINVAL, EACCES, EBADF, ENOENT)."""
            node = self._regular(t, path, fh)
            if punch:
                if offset < node.size:
                    node.blocks += t.punch_data(node.ino, offset, min(end, node.size))
                    node.mtime_ns = node.ctime_ns = now_ns()
                    node.generation += 1
                    t.put_inode(node)
                    t.journal(S.JournalRecord(S.OP_WRITE, node.ino, 0, b"", node.mtime_ns))
            elif not mode & FALLOC_FL_KEEP_SIZE and end > node.size:
                truncate_node(t, node, end, 0, b"")

        self.store.run_write(fn)

    def release(self, fh: int) -> None:
        """Close a handle; the last close of an unlinked file frees its inode."""
        closed = self.handles.close_file(fh)
        if closed is None or closed[0].virtual is not None:
            return
        h, n = closed
        p = self.pending.pop(fh)
        if p is not None:  # created and closed without a write: commit the empty file now
            try:
                self.pending.commit(p)
            except LibraryError as e:  # another process took the name meanwhile; close(2) has returned
                log.error("could not commit the create of %s: %s", show_name(p.path), escape_controls(str(e)))
                return
            h.committed_seq = self.store.write_seq
        unlinked = same = False
        # no write transaction of this process since this handle's last commit: nothing unlinked its file
        untouched = h.committed_seq == self.store.write_seq and not h.index_dir
        if n <= 0 and not h.wrote_after_journal and not self.read_only and not untouched:
            # one read decides whether the last close needs a write transaction at all: to free an unlinked
            # file, or to absorb a user's INDEX.md holding the generated bytes (`touch INDEX.md` claims the
            # name and writes nothing: without this the TOC would stay frozen as the user's file)
            with self.store.read() as t:
                node = t.inode(h.ino)
                if node is not None:
                    unlinked = node.nlink == 0
                    same = bool(h.index_dir) and not unlinked and self.virtual.absorbs(t, h.index_dir, node)
        hidden = n <= 0 and bool(self.handles.hidden_names(h.ino))  # it lingers: expire_hidden frees it
        if (h.wrote_after_journal or (unlinked and not hidden) or same) and not self.read_only:

            def fn(t: Txn) -> None:
                """The write transaction of the close: free the inode if this was the last handle of an
                unlinked file (one a libfuse hidden name reaches lingers instead: :meth:`expire_hidden`),
                else absorb a user's ``INDEX.md`` equal to the generated page (checked again here: the read
                above was a separate transaction), else journal a write made after the handle's first
                journal record."""
                node = t.inode(h.ino)
                if node is None:
                    return
                if node.nlink == 0 and n <= 0:
                    if not hidden:
                        t.del_inode(h.ino, is_dir=node.is_dir)
                    return
                if h.index_dir and n <= 0 and self._absorb(t, h.index_dir, node):
                    return
                if h.wrote_after_journal:
                    t.journal(S.JournalRecord(S.OP_WRITE, h.ino, 0, b"", now_ns()))

            self.store.run_write(fn)
        if n <= 0 and self.handles.hidden:
            self.handles.linger_ino(h.ino, time.monotonic())

    def expire_hidden(self, everything: bool = False) -> int:
        """Free the files that only a libfuse hidden name still reaches once they have lingered
        :data:`~libraryfs.fs.handles.LINGER_S` after their last close (``everything``: now, at unmount),
        and retire those names (ESTALE from then on; :mod:`libraryfs.fs.handles`). A file opened again
        through its name is kept (it lingers anew at its last close). Called by the mount's background
        pass (every 0.2 s) and at unmount; names are retired under the handle table's lock, which
        :meth:`open` takes while hidden names exist. Returns how many inodes were freed."""
        if not self.handles.linger:
            return 0
        free: set[int] = set()
        with self.handles.lock:  # no open resolves a name while it is retired (:meth:`open`)
            for key, ino in self.handles.due(time.monotonic(), everything):
                if self.handles.open_count(ino):
                    continue
                self.handles.retire_hidden(key)
                if not self.handles.hidden_names(ino):
                    free.add(ino)
        if not free or self.read_only:
            return 0

        def fn(t: Txn) -> int:
            """The write transaction: delete each inode of ``free`` still without a name."""
            n = 0
            for ino in free:
                node = t.inode(ino)
                if node is not None and node.nlink == 0:
                    t.del_inode(ino, is_dir=node.is_dir)
                    n += 1
            return n

        return self.store.run_write(fn)

    def _absorb(self, t: Txn, dir_ino: int, node: S.Inode | None) -> bool:
        """At the last close of a user's ``INDEX.md``: when its bytes are the generated page 0
        (:meth:`VirtualNamespace.absorbs`), drop the stored file so the generated TOC takes the name back
        (a copy of a tree that held the generated page converges). Returns whether it did."""
        if node is None or node.nlink != 1 or t.lookup(dir_ino, INDEX_NAME) != node.ino:
            return False
        if not self.virtual.absorbs(t, dir_ino, node):
            return False
        pnode = t.inode(dir_ino)
        assert pnode is not None
        now = now_ns()
        t.del_dirent(dir_ino, INDEX_NAME)
        t.del_inode(node.ino)
        set_index_claim(t, dir_ino, False)
        touch_dir(pnode, now)
        t.put_inode(pnode)
        t.journal(S.JournalRecord(S.OP_UNLINK, node.ino, dir_ino, INDEX_NAME, now))
        return True

    def fsync(self, fh: int | None = None) -> None:
        """Make every change durable against an OS crash (fsync(2)): commit pending creates, then sync the
        store (LMDB fsync) unless this process committed nothing since the last sync (:meth:`Store.sync`).
        Raises what committing a pending create raises (:meth:`PendingCreates.commit_all`)."""
        self.commit_pending()
        self.store.sync()

    def commit_pending(self) -> None:
        """Commit every pending create (the part of :meth:`fsync` that touches the view's state; the
        multithreaded mount syncs after it without the server lock). Raises the first create's error that
        could not be committed (:meth:`PendingCreates.commit_all`)."""
        if self.pending.by_fh:
            self.pending.commit_all(raise_errors=True)

    def purge_orphans(self) -> int:
        """Delete inodes left with nlink 0 by a crash while they were open, and empty the orphan register
        (``config[orphans]``); returns how many were deleted. Only for a process that knows no handle of
        any mount holds one (the mount server starting alone)."""

        def fn(t: Txn) -> int:
            """The write transaction: delete every non-directory inode with nlink 0; returns how many."""
            dead = [n.ino for n in t.iter_inodes() if n.nlink == 0 and not n.is_dir]
            for ino in dead:
                t.del_inode(ino)
            t.put_orphans(set())
            return len(dead)

        return self.store.run_write(fn)

    def reclaim_orphans(self, *, grace: bool = True) -> int:
        """Free the registered orphans (``config[orphans]``: files another process — the MCP server — left
        with nlink 0 because a mount might hold them open, :attr:`NameOps.defer_free
        <libraryfs.fs.nameops.NameOps.defer_free>`) that no handle of this view holds; returns how many.

        The mount calls it from its background pass (every :data:`~libraryfs.fs.mount.POLL_S`) with
        ``grace``: an orphan is freed only when the previous call saw it registered too, so an ``open`` that
        resolved the name just before the replacing commit has registered its handle by then (one read
        transaction when the register is empty). The MCP server calls it without ``grace`` once it knows no
        mount runs (no other handle can exist). A registered inode that is gone, or named again, is dropped
        from the register. Read-only: nothing (0)."""
        if self.read_only:
            return 0
        with self.store.read() as t:
            if not t.orphans():
                self._orphans_seen = frozenset()
                return 0
        seen = self._orphans_seen

        def fn(t: Txn) -> tuple[int, frozenset[int]]:
            """The write transaction: free the orphans due, keep the others registered; returns
            ``(freed, inodes still registered)``."""
            keep: set[int] = set()
            freed = 0
            for ino in t.orphans():
                node = t.inode(ino)
                if node is None or node.nlink > 0:
                    continue
                if self.handles.open_count(ino) or (grace and ino not in seen):
                    keep.add(ino)
                    continue
                t.del_inode(ino, is_dir=node.is_dir)
                freed += 1
            t.put_orphans(keep)
            return freed, frozenset(keep)

        freed, self._orphans_seen = self.store.run_write(fn)
        return freed
