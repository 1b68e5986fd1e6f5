"""Deferred creates: a new file's ``create`` is committed together with its first ``write`` (issue 18).

``open(O_CREAT)`` + ``write`` + ``close`` of a new file used to cost two store write transactions (the create,
then the write; the close only read). Now the create checks everything in a read transaction (parent, name,
generated names), takes an inode number from an in-memory block (:class:`InoPool`, reserved in the config
record by an earlier create: numbers never handed out are gaps, which invariant I6 allows) and answers the
kernel from the in-memory inode; the inode, its dirent, the parent's times and one ``CREATE`` journal
record are written by :func:`commit_create` in the transaction of the handle's first ``write`` — so a
create + write + close is **one** write transaction.

Until then the new name exists only in the view (:class:`PendingCreate`). Nothing can observe the gap:
``getattr`` of the new path or handle is answered from memory, and every other request that opens a store
transaction in a thread serving FUSE requests (the single-threaded loop's, or any worker of the
multithreaded server: :attr:`PendingCreates.serving`) sees every pending create (``Store.before_txn``): a
write transaction — whatever the request, e.g. SQLite's ``fchown`` of the journal it just created — writes
them first and commits them with its own writes (one transaction, not two; if the request fails, they stay
pending), and a read transaction is preceded by one write transaction committing them. ``release``,
``fsync`` and unmount commit them too. Crash contract (docs/reliability.md): every acknowledged ``write`` is
committed before it returns, as before; a kill -9 of the server after ``open(O_CREAT)`` returned but before
the file's first write, close or any other request was served loses that still-empty new name.
"""

from __future__ import annotations

import dataclasses
import logging
import stat as _stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

from libraryfs.errors import Exists, LibraryError, NotADir, NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.nameops import touch_dir
from libraryfs.fs.store import Store, Txn, now_ns
from libraryfs.shown import escape_controls, show_name

log = logging.getLogger("libraryfs.view")

INO_BLOCK = 256  #: inode numbers reserved per config write (one eager create per this many new files)


@dataclass(slots=True)
class PendingCreate:
    """A file created by handle ``fh`` at ``created_ns`` (ns since the epoch) and not yet in the store:
    ``node`` is its inode as it will be stored (a chmod, chown or utime of the file meanwhile changes it
    here), named ``name`` in directory ``pino`` (``path``: the absolute path it was created at)."""

    fh: int
    path: bytes
    pino: int
    name: bytes
    node: S.Inode
    created_ns: int


class InoPool:
    """Inode numbers reserved in the store and not yet handed out (``[next, end)``; empty at start)."""

    __slots__ = ("next", "end")

    def __init__(self) -> None:
        self.next = self.end = 0

    def take(self) -> int | None:
        """The next reserved number, or None when the block is used up (reserve another)."""
        if self.next >= self.end:
            return None
        ino = self.next
        self.next += 1
        return ino

    def empty(self) -> bool:
        """Whether every reserved number was handed out."""
        return self.next >= self.end

    def refill(self, first: int, count: int) -> None:
        """Hand out ``[first, first + count)`` from now on (a block :meth:`Txn.alloc_ino` reserved)."""
        self.next, self.end = first, first + count


def commit_create(t: Txn, p: PendingCreate, offset: int = 0, data: bytes = b"") -> S.Inode:
    """Write pending create ``p`` in write transaction ``t``, with ``data`` at byte ``offset`` when given (the
    handle's first ``write``): the inode, its dirent, the parent's mtime/ctime/generation (at the create's
    time) and one ``CREATE`` journal record (the indexer reads the file's bytes for it as for a ``WRITE``).
    Returns the inode as stored; ``p`` is not changed (``t``'s function may run twice).

    Raises NotFound (ENOENT: the parent is gone), NotADir, Exists (EEXIST: the name was taken) — possible
    only when a process other than this mount changed the store since the create was checked.
    """
    pnode = t.inode(p.pino)
    if pnode is None:
        raise NotFound("the new file's directory is gone")
    if not pnode.is_dir:
        raise NotADir("the new file's parent is not a directory")
    if t.lookup(p.pino, p.name) is not None:
        raise Exists("file exists")
    node = dataclasses.replace(p.node)
    now = p.created_ns
    if data:
        node.blocks += t.write_data(node.ino, offset, data, 0)  # a new file: no chunk to read (I5)
        node.size = offset + len(data)
        node.mtime_ns = node.ctime_ns = now_ns()
        node.generation += 1
        node.mode &= ~(_stat.S_ISUID | _stat.S_ISGID)  # as FileData.write: writing clears set-id bits
    t.put_inode(node)
    t.add_dirent(p.pino, p.name, node.ino, False, node.mode)
    touch_dir(pnode, now)
    t.put_inode(pnode)
    t.journal(S.JournalRecord(S.OP_CREATE, node.ino, p.pino, p.name, now))
    return node


class PendingCreates:
    """The pending creates of one mount, by file handle, and the inode numbers they are given.

    While any is pending it is the store's :class:`~libraryfs.fs.store.TxnHook` for the threads serving FUSE
    requests (``store.before_txn``): such a thread's next write transaction — whatever request it serves —
    writes them all first and commits them with its own writes, and its next read transaction is preceded by
    one write transaction committing them (module doc). Not thread-safe by itself: the requests that create,
    write and release run one at a time (the single-threaded loop, or under the multithreaded server's lock,
    :mod:`libraryfs.fs.serverlock`).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.by_fh: dict[int, PendingCreate] = {}
        self.inos = InoPool()
        #: creates are deferred only on a store no other mount writes (LMDB): on a shared store (etcd, whose
        #: backend has ``watch_prefix``, :mod:`libraryfs.fs.remote_inval`) another mount could take the name
        #: meanwhile, so O_EXCL must be decided by the create's own transaction
        self.enabled = not hasattr(store.backend, "watch_prefix")
        #: the last :meth:`in_write`'s outcome: the creates it wrote, and those it could not with their error
        self._written: list[PendingCreate] = []
        self._failed: list[tuple[PendingCreate, LibraryError]] = []
        #: ``serving() -> bool``: whether the calling thread serves FUSE requests (its transactions commit the
        #: pending creates first); None: the thread that made the create (the single-threaded loop, tests).
        #: The multithreaded mount sets the server lock's :meth:`~libraryfs.fs.serverlock.ServerLock.held`.
        self.serving: Callable[[], bool] | None = None

    def add(self, p: PendingCreate) -> None:
        """Hold ``p`` until its first write (or any other transaction of a thread serving requests)."""
        self.by_fh[p.fh] = p
        self._register()

    def _register(self) -> None:
        """Be :attr:`Store.before_txn` for the threads serving requests (:attr:`serving`; None: this one)."""
        self.store.before_txn = (self.serving or _thread_is(threading.get_ident()), self)

    def pop(self, fh: int) -> PendingCreate | None:
        """Take the pending create of handle ``fh`` out of the set (None if it has none)."""
        p = self.by_fh.pop(fh, None)
        if not self.by_fh:
            self.store.before_txn = None
        return p

    def node_of(self, path: bytes | None, fh: int | None) -> S.Inode | None:
        """The in-memory inode of the pending create open as ``fh``, else of the one created at ``path``
        (``fh`` None), else None."""
        if fh is not None:
            p = self.by_fh.get(fh)
            return p.node if p is not None else None
        for p in self.by_fh.values():
            if p.path == path:
                return p.node
        return None

    def has_name(self, pino: int, name: bytes) -> bool:
        """Whether a pending create is named ``name`` in directory ``pino``."""
        return any(p.pino == pino and p.name == name for p in self.by_fh.values())

    def commit(self, p: PendingCreate, offset: int = 0, data: bytes = b"") -> S.Inode:
        """Commit ``p`` (taken out of the set: :meth:`pop`; with its first write's ``data`` at ``offset``) in
        one write transaction, with any other pending create; returns the stored inode. Raises as
        :func:`commit_create`, and NoSpace."""
        return self.store.run_write(lambda t: commit_create(t, p, offset, data))

    # -- the store's TxnHook ------------------------------------------------------------------------------
    def in_write(self, t: Txn) -> None:
        """Write every pending create in ``t`` (before the request's own writes). One whose name another
        process took, or whose directory it removed, is left out (:meth:`committed` drops it)."""
        self._written, self._failed = [], []
        for p in self.by_fh.values():
            try:
                commit_create(t, p)  # raises before writing anything
            except LibraryError as e:
                self._failed.append((p, e))
            else:
                self._written.append(p)

    def committed(self) -> None:
        """The creates :meth:`in_write` wrote are stored: no longer pending. Those it could not write are
        logged and dropped (their handles then answer EBADF)."""
        for p in self._written:
            self.by_fh.pop(p.fh, None)
        for p, e in self._failed:
            self.by_fh.pop(p.fh, None)
            log.error("could not commit the create of %s: %s", show_name(p.path), escape_controls(str(e)))
        if self.by_fh:  # not reached: in_write took every pending create
            self._register()

    def before_read(self) -> None:
        """A read transaction of the FUSE thread begins next: commit every pending create first."""
        self.commit_all()

    def commit_all(self, raise_errors: bool = False) -> None:
        """Commit every pending create, all in one write transaction. A create that cannot be committed any
        more (another process took its name or removed its directory meanwhile) is logged and dropped —
        its handle then answers EBADF — or, with ``raise_errors``, its error is raised after the others were
        committed. Raises NoSpace (the creates stay pending)."""
        if not self.by_fh:
            return
        owed = self.store.before_txn
        self.store.before_txn = (
            _thread_is(threading.get_ident()),
            self,
        )  # also from another thread (unmount)
        try:
            self.store.run_write(_nothing)  # the hook writes them (in_write) and drops them (committed)
        except BaseException:
            self.store.before_txn = owed
            raise
        failed = self._failed
        self._failed = []
        if raise_errors and failed:
            raise failed[0][1]


def _thread_is(ident: int) -> Callable[[], bool]:
    """``mine()`` for :attr:`Store.before_txn`: whether the calling thread is the one of ``ident``."""
    return lambda: threading.get_ident() == ident


def _nothing(t: Txn) -> None:
    """A write transaction's function with no writes of its own (:meth:`PendingCreates.commit_all`)."""
