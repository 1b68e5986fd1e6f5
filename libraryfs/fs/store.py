"""The LMDB store: environment lifecycle, transactions with map growth, and typed record access.

Layout and invariants: :mod:`libraryfs.fs.schema`. This is the only module (with :mod:`libraryfs.fs.check`) that
imports ``lmdb``.

Threading policy (ARCHITECTURE §3, measured in §7): every transaction runs under one process-wide lock.
The mount serves FUSE single-threaded (``nothreads``), so the lock is uncontended except for its two small
background threads; the lock also makes :meth:`Store.grow` safe, because LMDB may only change the map size
while this process has no live transaction.

Durability: the environment is opened with ``sync=False`` (MDB_NOSYNC). A committed transaction is in the
OS page cache and survives a crash of any libraryfs process; :meth:`Store.sync` (called on ``fsync``,
``fsyncdir``, on unmount and every ``sync_interval_s`` by the mount) makes it survive an OS crash too.
One synced commit costs ~360 µs here, an unsynced one ~7 µs (ARCHITECTURE §7).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import lmdb

from libraryfs.errors import Corrupt, LibraryMissing, NoSpace
from libraryfs.fs import schema as S

T = TypeVar("T")

DEFAULT_MAP_SIZE = 256 << 20  #: bytes of address space reserved at first open (grows on demand)
MIN_FREE_TO_CREATE = 1 << 20  #: bytes of free disk ``Store.create`` requires (else NoSpace, not SIGBUS)
MIN_FREE_AFTER_GROW = 16 << 20  #: bytes of disk kept free (at most 1/16 of what is free) when the map grows


#: Errors raised by the storage engine for an unreadable/corrupt store (the CLI prints them on one line).
StoreError = lmdb.Error


def store_path(libdir: str | os.PathLike[str]) -> str:
    """Directory of the LMDB environment inside a library directory."""
    return os.path.join(os.fspath(libdir), "store")


def is_library(libdir: str | os.PathLike[str]) -> bool:
    """Whether ``libdir`` holds an initialised library."""
    return os.path.exists(os.path.join(store_path(libdir), "data.mdb"))


def now_ns() -> int:
    """Wall-clock time in ns since the epoch."""
    return time.time_ns()


class Txn:
    """A transaction with typed access to the named DBs (see :mod:`libraryfs.fs.schema`).

    Obtain it from :meth:`Store.read` or :meth:`Store.write`; never keep it past its ``with`` block.
    """

    __slots__ = ("t", "s", "write")

    def __init__(self, store: Store, txn: lmdb.Transaction, write: bool) -> None:
        self.t = txn
        self.s = store
        self.write = write

    # -- inodes ----------------------------------------------------------------------------------------
    def inode(self, ino: int) -> S.Inode | None:
        """The inode ``ino`` or ``None``."""
        raw = self.t.get(S.u64(ino), db=self.s.db_inodes)
        if raw is None:
            return None
        try:
            return S.Inode.unpack(ino, raw)
        except Exception as e:  # struct.error
            raise Corrupt(f"inode {ino} is corrupt: {e}") from e

    def put_inode(self, node: S.Inode) -> None:
        """Store an inode record."""
        self.t.put(S.u64(node.ino), node.pack(), db=self.s.db_inodes)

    def del_inode(self, ino: int) -> None:
        """Delete an inode with its data, xattrs, meta and TOC pages."""
        k = S.u64(ino)
        self.t.delete(k, db=self.s.db_inodes)
        self.t.delete(k, db=self.s.db_meta)
        self.t.delete(k, db=self.s.db_dirparent)
        self._delete_prefix(self.s.db_data, k)
        self._delete_prefix(self.s.db_xattrs, k)
        self._delete_prefix(self.s.db_toc, k)

    def alloc_ino(self) -> int:
        """A fresh inode number (I6)."""
        raw = self.t.get(S.CFG_NEXT_INO, db=self.s.db_config)
        ino = S.from_u64(raw) if raw else 2
        self.t.put(S.CFG_NEXT_INO, S.u64(ino + 1), db=self.s.db_config)
        return ino

    # -- dirents ---------------------------------------------------------------------------------------
    def lookup(self, parent: int, name: bytes) -> int | None:
        """Child inode number of ``name`` in directory ``parent`` (one B+tree lookup), or ``None``."""
        raw = self.t.get(S.dirent_key(parent, name), db=self.s.db_dirents)
        return None if raw is None else S.from_u64(raw)

    def add_dirent(
        self, parent: int, name: bytes, child: int, child_is_dir: bool, mode: int | None = None
    ) -> None:
        """Insert a dirent (and the ``dirparent`` back-link for a directory).

        The value carries the child's file type (one byte after the inode number) so that ``readdir``
        needs no inode fetch; ``mode`` defaults to the stored inode's.
        """
        if mode is None:
            node = self.inode(child)
            mode = node.mode if node is not None else (S.S_IFDIR if child_is_dir else S.S_IFREG)
        self.t.put(
            S.dirent_key(parent, name), S.u64(child) + bytes([(mode & S.S_IFMT) >> 12]), db=self.s.db_dirents
        )
        if child_is_dir:
            self.t.put(S.u64(child), S.u64(parent) + name, db=self.s.db_dirparent)

    def del_dirent(self, parent: int, name: bytes) -> None:
        """Remove a dirent (the ``dirparent`` link is rewritten by whoever re-links the directory)."""
        self.t.delete(S.dirent_key(parent, name), db=self.s.db_dirents)

    def dirparent(self, ino: int) -> tuple[int, bytes] | None:
        """``(parent ino, name)`` of a directory, ``None`` for the root or a file."""
        raw = self.t.get(S.u64(ino), db=self.s.db_dirparent)
        return None if raw is None else (S.from_u64(raw), raw[8:])

    def iter_dir(self, parent: int, after: bytes | None = None) -> Iterator[tuple[bytes, int]]:
        """``(name, child ino)`` of a directory in name-byte order, starting after ``after``."""
        prefix = S.u64(parent)
        cur = self.t.cursor(db=self.s.db_dirents)
        start = prefix + (after or b"")
        if not cur.set_range(start):
            return
        if after is not None and cur.key() == start and not cur.next():
            return
        for k, v in cur:
            if not k.startswith(prefix):
                break
            yield k[8:], S.from_u64(v)

    def iter_dir_typed(self, parent: int) -> Iterator[tuple[bytes, int, int | None]]:
        """``(name, child ino, file type bits S_IFMT or None if unrecorded)`` in name-byte order."""
        prefix = S.u64(parent)
        cur = self.t.cursor(db=self.s.db_dirents)
        if not cur.set_range(prefix):
            return
        for k, v in cur:
            if not k.startswith(prefix):
                break
            yield k[8:], S.from_u64(v), (v[8] << 12) if len(v) > 8 else None

    def dir_is_empty(self, ino: int) -> bool:
        """Whether a directory has no dirents."""
        return next(self.iter_dir(ino), None) is None

    def path_of(self, ino: int) -> bytes | None:
        """Absolute path (``b"/a/b"``) of a directory, or ``None`` if it is detached."""
        parts: list[bytes] = []
        seen = 0
        while ino != S.ROOT_INO:
            link = self.dirparent(ino)
            if link is None:
                return None
            ino, name = link
            parts.append(name)
            seen += 1
            if seen > 4096:
                raise Corrupt("dirparent cycle")
        return b"/" + b"/".join(reversed(parts))

    # -- data ------------------------------------------------------------------------------------------
    def read_data(self, ino: int, offset: int, size: int, file_size: int) -> bytes:
        """Bytes ``[offset, offset+size)`` of a file of ``file_size`` bytes; holes read as zeros."""
        if offset >= file_size or size <= 0:
            return b""
        end = min(offset + size, file_size)
        cs = S.CHUNK_SIZE
        out = bytearray()
        c = offset // cs
        while c * cs < end:
            chunk = self.t.get(S.data_key(ino, c), db=self.s.db_data) or b""
            lo = max(offset - c * cs, 0)
            hi = min(end - c * cs, cs)
            piece = chunk[lo:hi]
            out += piece
            if len(piece) < hi - lo:
                out += bytes(hi - lo - len(piece))
            c += 1
        return bytes(out)

    def write_data(self, ino: int, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset``, touching only the chunks it covers (the caller updates ``size``)."""
        cs = S.CHUNK_SIZE
        pos = 0
        n_total = len(data)
        db = self.s.db_data
        while pos < n_total:
            abs_off = offset + pos
            c, coff = divmod(abs_off, cs)
            n = min(cs - coff, n_total - pos)
            key = S.data_key(ino, c)
            if coff == 0 and n == cs:
                new = data[pos : pos + n]
            else:
                old = self.t.get(key, db=db) or b""
                if len(old) < coff:
                    old = old + bytes(coff - len(old))
                new = old[:coff] + data[pos : pos + n] + old[coff + n :]
            self.t.put(key, new, db=db)
            pos += n

    def truncate_data(self, ino: int, old_size: int, new_size: int) -> None:
        """Drop data past ``new_size`` (growing needs nothing: holes read as zeros)."""
        if new_size >= old_size:
            return
        cs = S.CHUNK_SIZE
        keep = -(-new_size // cs)  # chunks [0, keep) may remain
        cur = self.t.cursor(db=self.s.db_data)
        k0 = S.data_key(ino, keep)
        prefix = S.u64(ino)
        if cur.set_range(k0):
            while cur.key().startswith(prefix):
                if not cur.delete():
                    break
        if new_size % cs:
            key = S.data_key(ino, new_size // cs)
            old = self.t.get(key, db=self.s.db_data)
            if old is not None and len(old) > new_size % cs:
                self.t.put(key, old[: new_size % cs], db=self.s.db_data)

    def _delete_prefix(self, db: object, prefix: bytes) -> None:
        cur = self.t.cursor(db=db)
        if cur.set_range(prefix):
            while cur.key().startswith(prefix):
                if not cur.delete():
                    break

    # -- xattrs ----------------------------------------------------------------------------------------
    def getxattr(self, ino: int, name: bytes) -> bytes | None:
        """Value of an extended attribute or ``None``."""
        return self.t.get(S.u64(ino) + name, db=self.s.db_xattrs)

    def setxattr(self, ino: int, name: bytes, value: bytes) -> None:
        """Set an extended attribute."""
        self.t.put(S.u64(ino) + name, value, db=self.s.db_xattrs)

    def delxattr(self, ino: int, name: bytes) -> bool:
        """Remove an extended attribute; False if absent."""
        return self.t.delete(S.u64(ino) + name, db=self.s.db_xattrs)

    def listxattr(self, ino: int) -> list[bytes]:
        """Names of the extended attributes of ``ino``."""
        prefix = S.u64(ino)
        cur = self.t.cursor(db=self.s.db_xattrs)
        out = []
        if cur.set_range(prefix):
            for k in cur.iternext(keys=True, values=False):
                if not k.startswith(prefix):
                    break
                out.append(k[8:])
        return out

    # -- meta, toc, config, journal ---------------------------------------------------------------------
    def meta(self, ino: int) -> dict:
        """Indexer metadata of ``ino`` (``{}`` if none)."""
        return S.loads(self.t.get(S.u64(ino), db=self.s.db_meta), {})  # type: ignore[return-value]

    def put_meta(self, ino: int, meta: dict) -> None:
        """Store indexer metadata."""
        self.t.put(S.u64(ino), S.dumps(meta), db=self.s.db_meta)

    def toc_page(self, dir_ino: int, page: int) -> bytes | None:
        """Rendered TOC page (page 0 = INDEX.md) or ``None``."""
        return self.t.get(S.toc_key(dir_ino, page), db=self.s.db_toc)

    def put_toc_pages(self, dir_ino: int, pages: list[bytes]) -> None:
        """Replace all TOC pages of a directory."""
        self._delete_prefix(self.s.db_toc, S.u64(dir_ino))
        for i, p in enumerate(pages):
            self.t.put(S.toc_key(dir_ino, i), p, db=self.s.db_toc)

    def toc_page_count(self, dir_ino: int) -> int:
        """Number of TOC pages stored for a directory."""
        prefix = S.u64(dir_ino)
        cur = self.t.cursor(db=self.s.db_toc)
        n = 0
        if cur.set_range(prefix):
            for k in cur.iternext(keys=True, values=False):
                if not k.startswith(prefix):
                    break
                n += 1
        return n

    def cfg(self, key: bytes) -> bytes | None:
        """Raw config value."""
        return self.t.get(key, db=self.s.db_config)

    def put_cfg(self, key: bytes, value: bytes) -> None:
        """Set a config value."""
        self.t.put(key, value, db=self.s.db_config)

    def cfg_int(self, key: bytes, default: int = 0) -> int:
        """A u64 config value."""
        raw = self.cfg(key)
        return S.from_u64(raw) if raw else default

    def journal(self, rec: S.JournalRecord) -> int:
        """Append a journal record; returns its sequence number."""
        cur = self.t.cursor(db=self.s.db_journal)
        seq = S.from_u64(cur.key()) + 1 if cur.last() else max(1, self.cfg_int(S.CFG_CURSOR) + 1)
        self.t.put(S.u64(seq), rec.pack(), db=self.s.db_journal, append=True)
        return seq

    def journal_tail(self) -> int:
        """Sequence number of the last journal record (0 if the journal is empty)."""
        cur = self.t.cursor(db=self.s.db_journal)
        return S.from_u64(cur.key()) if cur.last() else self.cfg_int(S.CFG_CURSOR)

    def journal_since(self, seq: int, limit: int = 10_000) -> list[tuple[int, S.JournalRecord]]:
        """Up to ``limit`` records with sequence number ``> seq``."""
        cur = self.t.cursor(db=self.s.db_journal)
        out: list[tuple[int, S.JournalRecord]] = []
        if cur.set_range(S.u64(seq + 1)):
            for k, v in cur:
                out.append((S.from_u64(k), S.JournalRecord.unpack(v)))
                if len(out) >= limit:
                    break
        return out

    def journal_trim(self, upto: int) -> None:
        """Delete records with sequence number ``≤ upto`` (already consumed)."""
        cur = self.t.cursor(db=self.s.db_journal)
        if cur.first():
            while S.from_u64(cur.key()) <= upto:
                if not cur.delete():
                    break

    def count(self, db: object) -> int:
        """Number of records in a named DB."""
        return self.t.stat(db)["entries"]


class Store:
    """An open LMDB environment of one library (``<libdir>/store``).

    ``Store(libdir)`` opens an existing library; :meth:`create` initialises one. Raises
    :class:`LibraryMissing` when ``libdir`` holds no library, :class:`Corrupt` when its schema is unknown.
    Open it *after* any fork (py-lmdb refuses an environment inherited over fork).
    """

    def __init__(
        self,
        libdir: str | os.PathLike[str],
        *,
        readonly: bool = False,
        map_size: int | None = None,
        _create: bool = False,
    ) -> None:
        self.libdir = os.path.abspath(os.fspath(libdir))
        path = store_path(self.libdir)
        if not _create and not is_library(self.libdir):
            raise LibraryMissing(f"{self.libdir} is not a libraryfs library (run `libraryfs init` first)")
        if not _create and os.path.getsize(os.path.join(path, "data.mdb")) == 0:
            raise Corrupt(
                f"{self.libdir}: the store file is empty (store/data.mdb has 0 bytes); "
                f"restore it from a backup"
            )
        self.readonly = readonly
        self.lock = threading.RLock()
        try:
            cur_size = os.path.getsize(os.path.join(path, "data.mdb"))
        except OSError:
            cur_size = 0
        size = max(map_size or DEFAULT_MAP_SIZE, cur_size)
        try:
            self.env = lmdb.open(
                path,
                map_size=size,
                max_dbs=S.MAX_DBS,
                subdir=True,
                sync=False,
                metasync=False,
                readonly=readonly,
                create=_create,
                max_readers=1024,
                lock=True,
                readahead=False,
            )
        except lmdb.Error as e:
            raise LibraryMissing(f"cannot open library store {path}: {e}") from e
        with contextlib.suppress(lmdb.Error):
            self.env.reader_check()  # free reader slots of killed processes
        self._dbs: dict[bytes, object] = {}
        for name in S.CORE_DBS:
            self._dbs[name] = self.env.open_db(name, create=not readonly)
        (
            self.db_inodes,
            self.db_dirents,
            self.db_dirparent,
            self.db_data,
            self.db_xattrs,
            self.db_meta,
            self.db_journal,
            self.db_toc,
            self.db_names,
            self.db_config,
        ) = (self._dbs[n] for n in S.CORE_DBS)
        if not _create:
            try:
                with self.read() as t:
                    v = t.cfg(S.CFG_SCHEMA_VERSION)
            except lmdb.Error as e:
                self.env.close()
                raise Corrupt(
                    f"{self.libdir}: the store is corrupt or unreadable ({e}); "
                    f"run `libraryfs check` or restore it from a backup"
                ) from e
            if v is None or S.from_u64(v) != S.SCHEMA_VERSION:
                raise Corrupt(f"{self.libdir}: unknown schema version {v!r} (expected {S.SCHEMA_VERSION})")

    # -- lifecycle --------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, libdir: str | os.PathLike[str], settings: dict | None = None, map_size: int | None = None
    ) -> Store:
        """Initialise a new library in ``libdir`` (created with mode 0700) and return it open.

        Raises :class:`~libraryfs.errors.Exists`-like ``FileExistsError`` if a library is already there,
        :class:`NoSpace` if the disk has less than :data:`MIN_FREE_TO_CREATE` bytes free.
        """
        libdir = os.path.abspath(os.fspath(libdir))
        if is_library(libdir):
            raise FileExistsError(f"{libdir} already holds a library")
        os.makedirs(store_path(libdir), mode=0o700, exist_ok=True)
        os.chmod(libdir, 0o700)
        if shutil.disk_usage(store_path(libdir)).free < MIN_FREE_TO_CREATE:
            # LMDB maps its new lock file and dies of SIGBUS touching it on a full disk
            raise NoSpace(f"no space left on the disk holding {libdir}")
        st = cls(libdir, map_size=map_size, _create=True)
        now = now_ns()

        def init(t: Txn) -> None:
            root = S.Inode(S.ROOT_INO, S.S_IFDIR | 0o755, os.getuid(), os.getgid(), 2, 0, now, now, now)
            t.put_inode(root)
            t.put_cfg(S.CFG_NEXT_INO, S.u64(2))
            t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(S.SCHEMA_VERSION))
            t.put_cfg(S.CFG_CLEAN, b"1")
            t.put_cfg(S.CFG_CREATED, S.u64(now))
            t.put_cfg(S.CFG_SETTINGS, S.dumps(settings or {}))

        st.run_write(init)
        st.sync()
        return st

    def close(self) -> None:
        """Flush and close the environment."""
        with self.lock:
            with contextlib.suppress(lmdb.Error):
                if not self.readonly:
                    self.env.sync(True)
            self.env.close()

    def sync(self) -> None:
        """Force committed transactions to disk (fsync).

        Not under :attr:`lock`: ``mdb_env_sync`` is an fdatasync of the data file, safe beside running
        transactions, and py-lmdb releases the GIL for it. Holding the lock stalled every FUSE request for
        the whole fsync (3–7 ms here) once a second — the mount's p99 (docs/reliability.md).
        """
        if not self.readonly:
            self.env.sync(True)

    def open_db(self, name: bytes) -> object:
        """Open (creating if needed) an extension's named DB; use with :meth:`raw_read`/``raw_write``."""
        with self.lock:
            if name not in self._dbs:
                self._dbs[name] = self.env.open_db(name, create=not self.readonly)
            return self._dbs[name]

    # -- transactions ------------------------------------------------------------------------------------
    def read(self) -> _ReadTxn:
        """A read-only transaction (a consistent MVCC snapshot), as a context manager yielding a :class:`Txn`.

        A plain class rather than ``@contextmanager``: this is on every FUSE request (saves ~1.5 µs).
        """
        return _ReadTxn(self)

    def run_write(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in one write transaction and commit; returns ``fn``'s result.

        If the map is full the transaction is aborted, the map grows and ``fn`` runs again — so ``fn`` must
        not have side effects outside the transaction. Raises :class:`NoSpace` when the disk cannot hold a
        larger map; any exception from ``fn`` aborts the transaction and propagates.
        """
        for _attempt in range(64):
            with self.lock:
                txn = self._begin(write=True)
                try:
                    result = fn(Txn(self, txn, True))
                    txn.commit()
                    return result
                except lmdb.MapFullError:
                    txn.abort()
                    self._grow()
                except lmdb.Error as e:
                    txn.abort()
                    if "No space" in str(e) or isinstance(e, lmdb.DiskError) or self._disk_nearly_full():
                        # LMDB reports a short write of a full disk as EIO ("mdb_txn_commit: Input/output
                        # error"): with under MIN_FREE_AFTER_GROW bytes free, that is ENOSPC
                        raise NoSpace("no space left on the disk holding the library") from e
                    raise
                except BaseException:
                    txn.abort()
                    raise
        raise NoSpace("the library's map cannot grow any further")

    def _begin(self, write: bool) -> lmdb.Transaction:
        for _ in range(3):
            try:
                return self.env.begin(write=write)
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)  # adopt the size another process grew the map to
        return self.env.begin(write=write)

    def _disk_nearly_full(self) -> bool:
        """Whether the disk holding the store has less than :data:`MIN_FREE_AFTER_GROW` bytes free."""
        try:
            return shutil.disk_usage(store_path(self.libdir)).free < MIN_FREE_AFTER_GROW
        except OSError:
            return False

    def _grow(self) -> None:
        """Double the map size, bounded by the free space of the disk; :class:`NoSpace` if impossible."""
        info = self.env.info()
        cur = info["map_size"]
        path = os.path.join(store_path(self.libdir), "data.mdb")
        used = os.path.getsize(path)
        free = shutil.disk_usage(store_path(self.libdir)).free
        limit = used + max(0, free - min(MIN_FREE_AFTER_GROW, free // 16))
        new = min(cur * 2, limit)
        if new <= cur:
            raise NoSpace("no space left on the disk holding the library")
        self.env.set_mapsize(new)

    def map_info(self) -> dict:
        """``{"map_size": bytes, "used_bytes": bytes, "page_size": bytes}`` of the environment."""
        info = self.env.info()
        stat = self.env.stat()
        used = (info["last_pgno"] + 1) * stat["psize"]
        return {"map_size": info["map_size"], "used_bytes": used, "page_size": stat["psize"]}

    def settings(self) -> dict:
        """Library settings stored at ``init`` (e.g. ``toc_max_tokens``)."""
        with self.read() as t:
            return S.loads(t.cfg(S.CFG_SETTINGS), {})  # type: ignore[return-value]


class _ReadTxn:
    """Context manager of :meth:`Store.read`: the store lock plus one read-only LMDB transaction."""

    __slots__ = ("s", "txn")

    def __init__(self, store: Store) -> None:
        self.s = store

    def __enter__(self) -> Txn:
        self.s.lock.acquire()
        try:
            self.txn = self.s._begin(write=False)
        except BaseException:
            self.s.lock.release()
            raise
        return Txn(self.s, self.txn, False)

    def __exit__(self, *exc: object) -> None:
        try:
            self.txn.abort()
        finally:
            self.s.lock.release()
