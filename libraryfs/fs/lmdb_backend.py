"""The LMDB backend: the embedded default store of a library (``<libdir>/store``), the only module that
imports ``lmdb``.

Threading policy (ARCHITECTURE §3, measured in §7): every transaction runs under one process-wide lock.
The mount's FUSE handlers run one at a time (the single-threaded loop, or libfuse's multithreaded loop
under the server lock, :mod:`libraryfs.fs.serverlock`), so the lock is uncontended except for the
mount's small background threads; the lock also makes growing the map safe, because LMDB may only change
the map size while this process has no live transaction. :meth:`LmdbBackend.sync` is outside it (and
outside the server lock: concurrent fsyncs share one sync, :meth:`Store.sync
<libraryfs.fs.store.Store.sync>`).

Durability: the environment is opened with ``sync=False`` (MDB_NOSYNC). A committed transaction is in the
OS page cache and survives a crash of any libraryfs process; :meth:`LmdbBackend.sync` (called on ``fsync``,
``fsyncdir``, on unmount and every ``sync_interval_s`` by the mount) makes it survive an OS crash too.
One synced commit costs ~360 µs here, an unsynced one ~7 µs (ARCHITECTURE §7).

Space: the map starts at :data:`DEFAULT_MAP_SIZE` and doubles when a write transaction fills it, bounded by
the free space of the disk; a full disk is :class:`~libraryfs.errors.NoSpace` (ENOSPC), never SIGBUS.
Another process that grew the map is followed on its next transaction (MapResizedError → adopt the size).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import lmdb

from libraryfs.errors import Damaged, LibraryMissing, NoSpace, NotFound
from libraryfs.fs import lmdb_pages
from libraryfs.fs import schema as S
from libraryfs.fs.backend import prefix_end

T = TypeVar("T")

DEFAULT_MAP_SIZE = 256 << 20  #: bytes of address space reserved at first open (grows on demand)
MIN_FREE_TO_CREATE = 1 << 20  #: bytes of free disk ``create`` requires (else NoSpace, not SIGBUS)
MIN_FREE_AFTER_GROW = 16 << 20  #: bytes of disk kept free (at most 1/16 of what is free) when the map grows
#: Longest a write on a full disk waits for readers holding older snapshots (their pages freed since are
#: reusable only once they end: LMDB's freelist, mdb_page_alloc) before it is ENOSPC.
READER_WAIT_S = 5.0
DATA_FILE = "data.mdb"

#: Errors LMDB raises for an unreadable or corrupt store (the CLI prints them on one line, exit status 4).
ENGINE_ERRORS: tuple[type[Exception], ...] = (lmdb.Error,)
#: What LMDB raises at open for a file that is not a sound LMDB data file (→ Damaged, not LibraryMissing).
_DAMAGE_ERRORS = (lmdb.CorruptedError, lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.PageNotFoundError)


def _free_bytes(path: str) -> int:
    """Bytes free to an unprivileged user on the filesystem holding ``path`` (``shutil.disk_usage(path).free``,
    read the same way: ``statvfs(2)`` ``f_bavail * f_frsize``, without importing ``shutil`` and its
    compression modules into every command that reads the store). Raises ``OSError``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def store_path(libdir: str | os.PathLike[str]) -> str:
    """Directory of the LMDB environment inside a library directory."""
    return os.path.join(os.fspath(libdir), "store")


def exists(libdir: str | os.PathLike[str]) -> bool:
    """Whether ``libdir`` holds an LMDB store (its data file)."""
    return os.path.exists(os.path.join(store_path(libdir), DATA_FILE))


class LmdbTxn:
    """A read or write transaction over the named DBs (the ReadTxn/WriteTxn of :mod:`libraryfs.fs.backend`).

    As a context manager (from :meth:`LmdbBackend.read`) it takes the process-wide lock and begins a
    read-only transaction; :meth:`LmdbBackend.run_write` builds one around its write transaction.
    """

    __slots__ = ("_b", "_dbs", "_t")

    def __init__(self, backend: LmdbBackend, txn: lmdb.Transaction | None = None) -> None:
        self._b = backend
        self._dbs = backend._dbs
        if txn is not None:
            self._t = txn

    def __enter__(self) -> LmdbTxn:
        """Take the process-wide lock and begin a read-only transaction (adopting a map grown elsewhere)."""
        b = self._b
        b.lock.acquire()
        try:
            self._t = b.env.begin()
        except lmdb.MapResizedError:  # another process grew the map: adopt its size (LmdbBackend._begin)
            try:
                self._t = b._begin(write=False)
            except BaseException:
                b.lock.release()
                raise
        except BaseException:
            b.lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Abort the read transaction and release the lock."""
        try:
            self._t.abort()
        finally:
            self._b.lock.release()

    # -- reads ------------------------------------------------------------------------------------------
    def snapshot(self) -> int:
        """The id of the snapshot a read transaction sees (``mdb_txn_id(3)``: the last committed write
        transaction's id, shared by every process of the environment; ids only grow). Two read transactions
        with the same id see the same data."""
        return self._t.id()

    def get(self, table: bytes, key: bytes) -> bytes | None:
        """Value of ``key`` in ``table`` or None (KeyError for a table never opened)."""
        return self._t.get(key, None, self._dbs[table])  # type: ignore[return-value]  # positional: py-lmdb parses them faster

    def getter(self, table: bytes) -> Callable[[bytes], bytes | None]:
        """``get`` bound to one table: a cursor's ``get``, one C call per lookup (the path walk's hot
        loop; cheaper to make and to call than a ``functools.partial``)."""
        return self._t.cursor(self._dbs[table]).get  # type: ignore[return-value]

    def range(
        self,
        table: bytes,
        start: bytes = b"",
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
        keys_only: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` with ``start <= key < end`` in key order (``reverse``: descending), at most
        ``limit``; values are b"" with ``keys_only``. Do not write the range while iterating it."""
        if limit is not None and limit <= 0:
            return iter(())
        cur = self._t.cursor(self._dbs[table])
        if limit == 1:  # the first or last key (the journal's tail on every mutation): no generator
            item = _one(cur, start, end, reverse, keys_only)
            return iter(() if item is None else (item,))
        if reverse:
            return _backward(cur, start, end, limit, keys_only)
        return _forward(cur, start, end, limit, keys_only)

    def prefix(self, table: bytes, prefix: bytes, **kw) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`range` over the keys that start with ``prefix``."""
        return self.range(table, prefix, prefix_end(prefix), **kw)

    def count(self, table: bytes) -> int:
        """Number of keys in ``table`` (as this transaction sees it)."""
        return self._t.stat(self._dbs[table])["entries"]

    # -- writes -----------------------------------------------------------------------------------------
    def put(self, table: bytes, key: bytes, value: bytes, *, append: bool = False) -> None:
        """Set ``key``; ``append`` (MDB_APPEND) requires ``key`` to sort after every key of the table."""
        # positional (dupdata, overwrite: py-lmdb's defaults; append; db): parsed faster than keywords
        self._t.put(key, value, True, True, append, self._dbs[table])

    def delete(self, table: bytes, key: bytes) -> bool:
        """Remove ``key``; False if absent."""
        return self._t.delete(key, b"", self._dbs[table])

    def delete_range(self, table: bytes, start: bytes, end: bytes | None) -> int:
        """Remove the keys ``start <= key < end`` (``end`` None: to the end); returns how many."""
        cur = self._t.cursor(db=self._dbs[table])
        if not (cur.set_range(start) if start else cur.first()):
            return 0
        n = 0
        k: bytes = cur.key()  # type: ignore[assignment]  # bytes: the environment is opened without buffers
        while k and (end is None or k < end):  # an unpositioned cursor (past the last key) has key b""
            if not cur.delete():
                break
            n += 1
            k = cur.key()  # type: ignore[assignment]
        return n


def _one(cur, start: bytes, end: bytes | None, reverse: bool, keys_only: bool) -> tuple[bytes, bytes] | None:
    """The first (``reverse``: last) pair of ``start <= key < end``, or None."""
    if reverse:
        found = cur.last() if end is None or not cur.set_range(end) else cur.prev()
        if not found or cur.key() < start:
            return None
    else:
        found = cur.set_range(start) if start else cur.first()
        if not found or (end is not None and cur.key() >= end):
            return None
    return cur.key(), b"" if keys_only else cur.value()


def _forward(cur, start: bytes, end: bytes | None, limit: int | None, keys_only: bool):
    if not (cur.set_range(start) if start else cur.first()):
        return
    n = 0
    if keys_only:
        for k in cur.iternext(keys=True, values=False):
            if end is not None and k >= end:
                return
            yield k, b""
            n += 1
            if n == limit:
                return
    else:
        for k, v in cur.iternext(keys=True, values=True):
            if end is not None and k >= end:
                return
            yield k, v
            n += 1
            if n == limit:
                return


def _backward(cur, start: bytes, end: bytes | None, limit: int | None, keys_only: bool):
    if end is None or not cur.set_range(end):
        found = cur.last()  # every key is below ``end``
    else:
        found = cur.prev()  # the first key >= end, then one back
    if not found:
        return
    for n, (k, v) in enumerate(cur.iterprev(keys=True, values=True), start=1):
        if k < start:
            return
        yield (k, b"") if keys_only else (k, v)
        if n == limit:
            return


def make_libdir(libdir: str | os.PathLike[str]) -> None:
    """Make library directory ``libdir``: mode 0700 if new or empty; a directory that already holds files
    (``init --force``) keeps its mode."""
    libdir = os.path.abspath(os.fspath(libdir))
    had_files = os.path.isdir(libdir) and bool(os.listdir(libdir))
    os.makedirs(libdir, mode=0o700, exist_ok=True)
    if not had_files:
        os.chmod(libdir, 0o700)


class LmdbBackend:
    """An open LMDB environment of one library: the core tables plus extension tables opened on demand.

    ``LmdbBackend(libdir)`` opens an existing store; :meth:`create` makes a new one. ``sync``/``metasync``
    (MDB_NOSYNC/MDB_NOMETASYNC off) make every commit durable: only for measuring that trade-off
    (``bench/crash_run.py --sync-cost``); a library always runs without them. Raises
    :class:`LibraryMissing` when the store cannot be opened, :class:`~libraryfs.errors.Damaged` when its
    data file fails the checks made with plain reads before LMDB maps it (empty, truncated, a bad meta page:
    :func:`libraryfs.fs.lmdb_pages.check_meta`; a mapped truncated file would be SIGBUS) or LMDB calls it
    corrupt; ``verify`` (default: when writable) also walks every reachable page first
    (:func:`libraryfs.fs.lmdb_pages.verify`, 22 ms for a 23 MB store, 0.27 s for 222 MB). Open it *after*
    any fork (py-lmdb refuses an environment inherited over fork).
    """

    name = "lmdb"

    def __init__(
        self,
        libdir: str | os.PathLike[str],
        *,
        readonly: bool = False,
        map_size: int | None = None,
        sync: bool = False,
        metasync: bool = False,
        verify: bool | None = None,
        _create: bool = False,
    ) -> None:
        self.libdir = os.path.abspath(os.fspath(libdir))
        self.path = store_path(self.libdir)
        data = os.path.join(self.path, DATA_FILE)
        if not _create and os.path.exists(data):
            if os.path.getsize(data) == 0:
                raise Damaged(
                    f"the library's store is damaged: {self.libdir}: the store file is empty "
                    f"(store/{DATA_FILE} has 0 bytes); restore it from a backup"
                )
            lmdb_pages.check_meta(self.path)
            if verify if verify is not None else not readonly:  # a writer never writes into damage
                lmdb_pages.verify(self.path)
        self.readonly = readonly
        self.lock = threading.RLock()
        try:
            cur_size = os.path.getsize(data)
        except OSError:
            cur_size = 0
        try:
            self.env = lmdb.open(
                self.path,
                map_size=max(map_size or DEFAULT_MAP_SIZE, cur_size),
                max_dbs=S.MAX_DBS,
                subdir=True,
                sync=sync,
                metasync=metasync,
                readonly=readonly,
                create=_create,
                max_readers=1024,
                lock=True,
                readahead=False,
            )
        except _DAMAGE_ERRORS as e:
            raise Damaged(f"the library's store is damaged: {self.path}: {e}") from e
        except lmdb.Error as e:
            raise LibraryMissing(f"cannot open library store {self.path}: {e}") from e
        with contextlib.suppress(lmdb.Error):
            self.env.reader_check()  # free reader slots of killed processes
        self._dbs: dict[bytes, Any] = {}  # py-lmdb's _Database handles
        try:
            # the config table first, made only by a new store: an LMDB store of another program gets no
            # table of ours before it is refused (NotFoundError → LibraryMissing below)
            self._dbs[S.DB_CONFIG] = self.env.open_db(S.DB_CONFIG, create=_create)
            for name in S.CORE_DBS:
                if name != S.DB_CONFIG:  # tables a later schema added are made in an older store
                    self._dbs[name] = self.env.open_db(name, create=not readonly)
        except lmdb.Error as e:
            self.env.close()
            if isinstance(e, lmdb.ReadonlyError | lmdb.NotFoundError):  # a core table is missing: not ours
                raise LibraryMissing(
                    f"{self.path} is an LMDB store without libraryfs's tables: not a libraryfs library"
                ) from e
            raise Damaged(f"the library's store is damaged: {self.path}: {e}") from e

    @classmethod
    def create(cls, libdir: str | os.PathLike[str], map_size: int | None = None, **kw: bool) -> LmdbBackend:
        """Make the store directory and a new, empty environment; a new or empty library directory is made
        mode 0700, one that already holds files keeps its mode.

        Raises ``FileExistsError`` if a store is there, :class:`NoSpace` below :data:`MIN_FREE_TO_CREATE`.
        """
        libdir = os.path.abspath(os.fspath(libdir))
        if exists(libdir):
            raise FileExistsError(f"{libdir} already holds a library")
        make_libdir(libdir)
        os.makedirs(store_path(libdir), mode=0o700, exist_ok=True)
        if _free_bytes(store_path(libdir)) < MIN_FREE_TO_CREATE:
            # LMDB maps its new lock file and dies of SIGBUS touching it on a full disk
            raise NoSpace(f"no space left on the disk holding {libdir}")
        return cls(libdir, map_size=map_size, _create=True, **kw)

    # -- lifecycle --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush (when writable) and close the environment."""
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

    def open_table(self, name: bytes) -> None:
        """Open (creating it if writable) an extension's named DB; :class:`~libraryfs.errors.NotFound` when a
        read-only store does not have it yet."""
        with self.lock:
            if name not in self._dbs:
                try:
                    self._dbs[name] = self.env.open_db(name, create=not self.readonly)
                except (lmdb.NotFoundError, lmdb.ReadonlyError) as e:
                    raise NotFound(f"table {name.decode(errors='replace')!r} does not exist yet") from e

    def tables(self) -> list[bytes]:
        """Names of every table the store holds (the named DBs: core and extension tables), sorted."""
        with self.lock, self.env.begin() as t:
            return sorted(bytes(k) for k in t.cursor().iternext(keys=True, values=False))

    def info(self) -> dict:
        """``{"map_size": bytes, "used_bytes": bytes, "page_size": bytes}`` of the environment."""
        info = self.env.info()
        stat = self.env.stat()
        used = (info["last_pgno"] + 1) * stat["psize"]
        return {"map_size": info["map_size"], "used_bytes": used, "page_size": stat["psize"]}

    # -- transactions ------------------------------------------------------------------------------------
    def read(self) -> LmdbTxn:
        """A read-only transaction (a consistent MVCC snapshot) as a context manager.

        A plain class rather than ``@contextmanager``: this is on every FUSE request (saves ~1.5 µs).
        """
        return LmdbTxn(self)

    def run_write(self, fn: Callable[[LmdbTxn], T]) -> T:
        """Run ``fn`` in one write transaction and commit; returns ``fn``'s result.

        If the map is full the transaction is aborted, the map grows (or, on a full disk, the write waits for
        readers holding pages freed since their snapshot: :meth:`_grow_or_pinned`) and ``fn`` runs again — so
        ``fn`` must not have side effects outside the transaction. Raises :class:`NoSpace` when the disk cannot hold a
        larger map; any exception from ``fn`` aborts the transaction and propagates.
        """
        for _attempt in range(64):
            pinned: int | None = None
            with self.lock:
                txn = self._begin(write=True)
                try:
                    result = fn(LmdbTxn(self, txn))
                    txn.commit()
                    return result
                except lmdb.MapFullError:
                    txn.abort()
                    pinned = self._grow_or_pinned()
                except lmdb.Error as e:
                    txn.abort()
                    if "No space" in str(e) or isinstance(e, lmdb.DiskError) or self._disk_nearly_full():
                        # LMDB reports a short write of a full disk as EIO ("mdb_txn_commit: Input/output
                        # error"): with under MIN_FREE_AFTER_GROW bytes free, that is ENOSPC
                        pinned = self._pinned_by_reader()
                        if pinned is None:
                            raise NoSpace("no space left on the disk holding the library") from e
                    else:
                        raise
                except BaseException:
                    txn.abort()
                    raise
            if pinned is not None:  # outside the lock: a reader of this process may need it to finish
                self._wait_reader_moves(pinned)
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
            return _free_bytes(self.path) < MIN_FREE_AFTER_GROW
        except OSError:
            return False

    def _grow_or_pinned(self) -> int | None:
        """Grow the map (:meth:`_grow`); when the disk cannot hold more but a live reader holds a snapshot
        older than the last commit (pages freed since, e.g. by ``rm``, are pinned until it ends), the txnid
        it holds, to wait for (:meth:`_pinned_by_reader`). Raises :class:`NoSpace` otherwise."""
        try:
            self._grow()
            return None
        except NoSpace:
            pinned = self._pinned_by_reader()
            if pinned is None:
                raise
            return pinned

    def _pinned_by_reader(self) -> int | None:
        """The txnid of the oldest snapshot a live reader holds when it is older than the last commit (the
        pages freed since cannot be reused yet), else None."""
        oldest = self._oldest_reader()
        return oldest if oldest is not None and oldest < self.env.info()["last_txnid"] else None

    def _oldest_reader(self) -> int | None:
        """The txnid of the oldest snapshot a live reader holds (LMDB's reader table, after clearing the
        slots of dead processes: ``mdb_reader_check``), or None when no read transaction is open."""
        self.env.reader_check()
        ids = [
            int(f[2])
            for f in (ln.split() for ln in self.env.readers().splitlines()[1:])
            if len(f) == 3 and f[2].isdigit()
        ]
        return min(ids) if ids else None

    def _wait_reader_moves(self, pinned: int) -> None:
        """Wait (at most :data:`READER_WAIT_S`) until no reader holds snapshot ``pinned`` or older any more;
        :class:`NoSpace` when one still does then."""
        deadline = time.monotonic() + READER_WAIT_S
        while (oldest := self._oldest_reader()) is not None and oldest <= pinned:
            if time.monotonic() > deadline:
                raise NoSpace("no space left on the disk holding the library (a reader holds freed pages)")
            time.sleep(0.005)

    def _grow(self) -> None:
        """Double the map size, bounded by the free space of the disk; :class:`NoSpace` if impossible."""
        cur = self.env.info()["map_size"]
        used = os.path.getsize(os.path.join(self.path, DATA_FILE))
        free = _free_bytes(self.path)
        limit = used + max(0, free - min(MIN_FREE_AFTER_GROW, free // 16))
        new = min(cur * 2, limit)
        if new <= cur:
            raise NoSpace("no space left on the disk holding the library")
        self.env.set_mapsize(new)
