"""What the library looks like: POSIX semantics over the store, behind one façade (:class:`LibraryView`).

Everything that decides what the mount shows lives in the view and is testable without a mount (borg's
``vfs.py`` beside ``hlfuse.py``); :mod:`libraryfs.fs.fuse_adapter` only translates. Paths are absolute bytes
(``b"/section/entry.md"``); names are raw bytes. Errors are :mod:`libraryfs.errors` classes.

:class:`LibraryView` is the one object its callers use (the FUSE adapter, the store-backed tree of
:mod:`libraryfs.layout`, tests). It holds no logic: each method passes its arguments to one of the small
services it builds in ``__init__``, each a class with its own explicit state:

================  ================================================  ==========================================
attribute         service                                           state
================  ================================================  ==========================================
``handles``       :class:`~libraryfs.fs.handles.HandleTable`        open files/directories, open counts,
                                                                    libfuse's hidden names
``resolver``      :class:`~libraryfs.fs.resolve.Resolver`           (none: store, namespace, handles)
``virtual``       :class:`~libraryfs.fs.virtual.VirtualNamespace`   virtual inode numbers; TOC pages
                                                                    (:mod:`~libraryfs.fs.tocpages`), control
                                                                    plane (:mod:`~libraryfs.fs.control`),
                                                                    finder
``accounting``    :class:`~libraryfs.fs.stats.ReadAccounting`       read counters per pid, read budget
``files``         :class:`~libraryfs.fs.filedata.FileData`          (none: file data lives in the store)
``listing``       :class:`~libraryfs.fs.listing.DirListing`         (none)
``names``         :class:`~libraryfs.fs.nameops.NameOps`            (none)
``attrs``         :class:`~libraryfs.fs.attrs.AttrOps`              whether a ``security.*`` xattr exists
================  ================================================  ==========================================

Generated files are served through the page cache (a shared ``mmap`` works) but never from a stale one:
every open drops their cached pages, and an open whose size the kernel does not hold gets ``direct_io``
(:mod:`libraryfs.fs.filedata`); the mount invalidates their attributes when the indexer commits
(:mod:`libraryfs.fs.mount`). Writing them is EACCES;
removing them (``unlink INDEX.md``, ``rmdir .index``) succeeds without effect, so ``rm -r DIR`` works (C05).
Behaviour against POSIX and pjdfstest: ``docs/posix.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from libraryfs.fs.attrs import AttrOps
from libraryfs.fs.control import ControlPlane
from libraryfs.fs.filedata import FileData
from libraryfs.fs.handles import HandleTable
from libraryfs.fs.listing import DirListing
from libraryfs.fs.nameops import NameOps
from libraryfs.fs.nodes import Resolved, inode_stat
from libraryfs.fs.resolve import Resolver
from libraryfs.fs.stats import Budget, ReadAccounting, ReadStats
from libraryfs.fs.store import Store, Txn, now_ns
from libraryfs.fs.tocpages import TocPages
from libraryfs.fs.virtual import VirtualNamespace


class LibraryView:
    """POSIX filesystem semantics over a :class:`~libraryfs.fs.store.Store` (one instance per mount).

    ``finder(txn, term) -> list[bytes]`` (matching absolute paths, behind ``/.find/``) and
    ``status_provider() -> dict`` (mount-process facts for ``status.json``) are optional callables from
    higher layers (the daemon), so the view never imports them. ``budget`` is the mount's read budget
    (:class:`~libraryfs.fs.budget.ReadBudget`; reads past it fail with EDQUOT) or None;
    ``count_tokens(bytes) -> int`` counts a TOC page the indexer has not counted (default ``bytes/4``).
    ``read_only`` makes every change fail with EROFS.
    """

    def __init__(
        self,
        store: Store,
        *,
        read_only: bool = False,
        finder: Callable[[Txn, bytes], list[bytes]] | None = None,
        status_provider: Callable[[], dict] | None = None,
        budget: Budget | None = None,
        count_tokens: Callable[[bytes], int] | None = None,
        mount_alive: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        #: None: this view is the mount's, or no mount runs beside it; else ``mount_alive()`` says whether a
        #: mount of the library runs now, whose open handles this view cannot see (:meth:`settle_orphans`)
        self.mount_alive = mount_alive
        self.read_only = read_only
        started_ns = now_ns()
        self.accounting = ReadAccounting(budget)
        control = ControlPlane(
            store,
            self.accounting,
            read_only=read_only,
            started_ns=started_ns,
            status_provider=status_provider,
        )
        toc = TocPages(store, started_ns, count_tokens)
        self.virtual = VirtualNamespace(toc, control, started_ns=started_ns, finder=finder)
        self.handles = HandleTable()
        self.resolver = Resolver(store, self.virtual, self.handles)
        self.files = FileData(store, self.resolver, self.accounting, read_only=read_only)
        self.listing = DirListing(store, self.resolver)
        self.names = NameOps(store, self.resolver, read_only=read_only)
        self.names.defer_free = mount_alive is not None
        self.attrs = AttrOps(store, self.resolver, read_only=read_only, pending=self.files.pending)

    # -- state other layers read ----------------------------------------------------------------------------
    @property
    def stats(self) -> ReadStats:
        """Read counters per process (:class:`~libraryfs.fs.stats.ReadStats`, ``stats.json``)."""
        return self.accounting.stats

    @property
    def budget(self) -> Budget | None:
        """The read budget, or None (``budget`` control file)."""
        return self.accounting.budget

    @property
    def finder(self) -> Callable[[Txn, bytes], list[bytes]] | None:
        """``finder(txn, term) -> list[bytes]`` behind ``/.find/``, or None."""
        return self.virtual.finder

    @property
    def status_provider(self) -> Callable[[], dict] | None:
        """``status_provider() -> dict`` of mount-process facts for ``status.json``, or None."""
        return self.virtual.control.status_provider

    @property
    def started_ns(self) -> int:
        """When this view was created (ns since the epoch): the times of the virtual objects."""
        return self.virtual.started_ns

    @property
    def hidden(self) -> dict[tuple[int, bytes], int]:
        """libfuse's hidden names of files unlinked while open: ``(parent ino, name) → ino`` (C11)."""
        return self.handles.hidden

    def aliases(self, path: bytes | None) -> tuple[list[bytes], bool]:
        """The other names of the hard-linked file at ``path`` that the kernel has looked up (their cached
        attributes go stale when this name changes the inode; :mod:`libraryfs.fs.aliases`), and whether
        dropping those caches from inside a request is safe now: no handle is open on the inode, so no read
        or write of it can be waiting for a reply (the kernel's invalidation would wait for its page locks,
        and that reply for the request making it: the single-threaded loop, or the multithreaded server's
        lock, :mod:`libraryfs.fs.serverlock`). ``([], True)`` for a name that is not noted."""
        if path is None:
            return [], True
        ino, others = self.handles.links.others(path)
        return others, not others or self.handles.open_count(ino) == 0

    def resolve(self, t: Txn, path: bytes) -> Resolved:
        """Resolve an absolute path in transaction ``t`` (:meth:`Resolver.resolve`)."""
        return self.resolver.resolve(t, path)

    def status(self, t: Txn) -> dict:
        """The facts of ``.libraryfs/status.json`` (indexer status, journal backlog, TOC generation)."""
        return self.virtual.control.status(t)

    # -- attributes (AttrOps) ---------------------------------------------------------------------------------
    def getattr(self, path: bytes | None, fh: int | None = None) -> dict:
        """``stat`` of a path, or of an open handle (works after unlink). Raises NotFound/NotADir. A file
        created and not yet written is answered from memory (:mod:`libraryfs.fs.pending`)."""
        if self.files.pending.by_fh:
            node = self.files.pending.node_of(path, fh if self.handles.file(fh) is not None else None)
            if node is not None:
                return inode_stat(node)
        return self.attrs.getattr(path, fh)

    def chmod(self, path: bytes | None, mode: int, fh: int | None = None) -> None:
        """Set permission bits (the file type bits are kept)."""
        self.attrs.chmod(path, mode, fh)

    def chown(self, path: bytes | None, uid: int, gid: int, fh: int | None = None) -> None:
        """Set owner and group; -1 leaves one unchanged. Clears set-id bits of regular files (POSIX)."""
        self.attrs.chown(path, uid, gid, fh)

    def utimens(self, path: bytes | None, atime, mtime, fh: int | None = None) -> None:
        """Set times in ns; each is an int, ``UTIME_NOW`` or ``UTIME_OMIT`` (:mod:`libraryfs.fs.attrs`)."""
        self.attrs.utimens(path, atime, mtime, fh)

    def statfs(self) -> dict:
        """``statvfs`` from real figures: LMDB pages in use plus the free space of the disk below it."""
        return self.attrs.statfs()

    def getxattr(self, path: bytes, name: bytes) -> bytes:
        """Value of an extended attribute (ENODATA if absent)."""
        return self.attrs.getxattr(path, name)

    def find_xattr(self, path: bytes, name: bytes) -> bytes | None:
        """Value of an extended attribute, or None if absent (:meth:`AttrOps.find_xattr`)."""
        return self.attrs.find_xattr(path, name)

    def listxattr(self, path: bytes) -> list[bytes]:
        """Names of the extended attributes."""
        return self.attrs.listxattr(path)

    def setxattr(self, path: bytes, name: bytes, value: bytes, flags: int) -> None:
        """Set an extended attribute (XATTR_CREATE → EEXIST if present, XATTR_REPLACE → ENODATA if not)."""
        self.attrs.setxattr(path, name, value, flags)

    def removexattr(self, path: bytes, name: bytes) -> None:
        """Remove an extended attribute (ENODATA if absent)."""
        self.attrs.removexattr(path, name)

    # -- directories (DirListing) -------------------------------------------------------------------------------
    def opendir(self, path: bytes) -> int:
        """Snapshot a directory listing; returns a directory handle. Raises NotFound/NotADir."""
        return self.listing.opendir(path)

    def readdir(self, fh: int, offset: int) -> Iterator[tuple[bytes, int, int, int]]:
        """Entries ``(name, type bits, ino, next offset)`` from ``offset`` of an open directory handle."""
        return self.listing.readdir(fh, offset)

    def readdir_plus(self, fh: int, offset: int) -> Iterator[tuple[bytes, int, int, int, dict | None]]:
        """READDIRPLUS entries ``(name, type bits, ino, next offset, stat or None)``; see :class:`DirListing`."""
        return self.listing.readdir_plus(fh, offset)

    def dir_path(self, fh: int) -> bytes | None:
        """Current path of the stored directory open as ``fh`` (None: generated, detached or unknown)."""
        return self.listing.dir_path(fh)

    def releasedir(self, fh: int) -> None:
        """Forget a directory handle."""
        self.listing.releasedir(fh)

    # -- file data (FileData) -----------------------------------------------------------------------------------
    def create(self, path: bytes, mode: int, flags: int, uid: int, gid: int) -> int:
        """``open(O_CREAT)``: create (or, without O_EXCL, open) a regular file; returns a handle."""
        return self.files.create(path, mode, flags, uid, gid)

    def open(self, path: bytes, flags: int) -> tuple[int, bool]:
        """Open a file; returns ``(handle, direct_io)``. ``direct_io`` is True for a generated file whose
        size changed since the kernel last asked and for SQLite's logs (:mod:`libraryfs.fs.filedata`)."""
        return self.files.open(path, flags)

    def direct_io(self, path: bytes | None) -> bool:
        """Whether a file created at ``path`` is served with ``direct_io`` (SQLite's ``-wal`` and
        ``-journal`` files beside their database: :meth:`FileData.direct_io
        <libraryfs.fs.filedata.FileData.direct_io>`)."""
        return self.files.direct_io(path)

    def keep_cache(self, fh: int) -> bool:
        """Whether the kernel may keep its cached pages of the file opened as ``fh`` (FOPEN_KEEP_CACHE)."""
        return self.files.keep_cache(fh)

    def read(self, fh: int, size: int, offset: int, pid: int = 0) -> bytes:
        """Up to ``size`` bytes at ``offset`` (short at EOF). Counts the read for ``pid`` (stats.json)."""
        return self.files.read(fh, size, offset, pid)

    def seek(self, fh: int, offset: int, whence: int) -> int:
        """``lseek`` SEEK_DATA/SEEK_HOLE from the chunk map (:meth:`FileData.seek
        <libraryfs.fs.filedata.FileData.seek>`); ENXIO past the data or the end of file."""
        return self.files.seek(fh, offset, whence)

    def write(self, fh: int, data: bytes, offset: int) -> int:
        """Write at ``offset`` (at the store's end of file when the handle has O_APPEND); returns bytes."""
        return self.files.write(fh, data, offset)

    def truncate(self, path: bytes | None, length: int, fh: int | None = None) -> None:
        """Set a file's size (``truncate``/``ftruncate``); growing makes a hole."""
        self.files.truncate(path, length, fh)

    def fallocate(self, path: bytes | None, fh: int | None, mode: int, offset: int, length: int) -> None:
        """``fallocate(2)``: mode 0 and KEEP_SIZE (size only, nothing reserved), PUNCH_HOLE|KEEP_SIZE
        (:meth:`FileData.fallocate <libraryfs.fs.filedata.FileData.fallocate>`); other modes EOPNOTSUPP."""
        self.files.fallocate(path, fh, mode, offset, length)

    def release(self, fh: int) -> None:
        """Close a handle; the last close of an unlinked file frees its inode (one a libfuse hidden name
        reaches lingers: :meth:`reclaim_orphans`)."""
        self.files.release(fh)

    def fsync(self, fh: int | None = None) -> None:
        """Make every committed change durable against an OS crash (LMDB fsync)."""
        self.files.fsync(fh)

    def commit_pending(self) -> None:
        """Commit the pending creates (:meth:`FileData.commit_pending
        <libraryfs.fs.filedata.FileData.commit_pending>`): what :meth:`fsync` does before the store's sync."""
        self.files.commit_pending()

    def serve_from(self, serving: Callable[[], bool], workers: int = 1) -> None:
        """Requests are served by whichever thread ``serving()`` is True for (the mount: the holder of its
        :class:`~libraryfs.fs.serverlock.ServerLock`), not only by the thread that made a pending create:
        any of them commits it before its next transaction (:mod:`libraryfs.fs.pending`). ``workers`` > 1:
        libfuse serves with several threads, so its hide of a file unlinked while open can come after the
        last close (:meth:`NameOps._hide <libraryfs.fs.nameops.NameOps._hide>`)."""
        self.files.pending.serving = serving
        self.names.hide_closed = workers > 1

    def purge_orphans(self) -> int:
        """Delete inodes left with nlink 0 by a crash while they were open; returns how many."""
        return self.files.purge_orphans()

    def reclaim_orphans(self) -> int:
        """The mount's background pass: free the files whose libfuse hidden names have lingered long enough
        (:meth:`FileData.expire_hidden <libraryfs.fs.filedata.FileData.expire_hidden>`) and the registered
        orphans no handle holds any more (freed after being seen registered by two passes,
        :meth:`FileData.reclaim_orphans <libraryfs.fs.filedata.FileData.reclaim_orphans>`); returns how
        many inodes were freed."""
        return self.files.expire_hidden() + self.files.reclaim_orphans()

    def settle_orphans(self) -> int:
        """For a view beside a possible mount (``mount_alive`` set: the MCP server), after a change that may
        have left a file without names: free the registered orphans at once when no mount runs now (nothing
        else can hold them open; a mount started later never saw them); with a mount running, that mount
        frees them once its last handle is closed. Returns how many were freed."""
        if self.mount_alive is None or self.read_only:
            return 0
        with self.store.read() as t:
            if not t.orphans():
                return 0
        if self.mount_alive():
            return 0
        return self.files.reclaim_orphans(grace=False)

    # -- names (NameOps) ----------------------------------------------------------------------------------------
    def mkdir(self, path: bytes, mode: int, uid: int, gid: int) -> None:
        """Create a directory. Raises Exists, NotFound (parent), NotADir, NameTooLong."""
        self.names.mkdir(path, mode, uid, gid)

    def rmdir(self, path: bytes) -> None:
        """Remove an empty directory. Raises NotEmpty, NotADir, NotFound, Busy (root)."""
        self.names.rmdir(path)

    def mknod(self, path: bytes, mode: int, rdev: int, uid: int, gid: int) -> None:
        """``mknod(2)``: a regular file, FIFO, socket or device node."""
        self.names.mknod(path, mode, rdev, uid, gid)

    def symlink(self, path: bytes, target: bytes, uid: int, gid: int) -> None:
        """Create a symbolic link at ``path`` pointing to ``target`` (stored verbatim, never followed)."""
        self.names.symlink(path, target, uid, gid)

    def readlink(self, path: bytes) -> bytes:
        """Target of a symbolic link. Raises InvalidArgument if not a link."""
        return self.names.readlink(path)

    def link(self, existing: bytes, new: bytes) -> None:
        """Hard link ``new`` to the file at ``existing``. Directories: EPERM (POSIX link(2))."""
        self.names.link(existing, new)

    def unlink(self, path: bytes) -> None:
        """Remove a name; an open file keeps its data until the last close (POSIX unlink); beside a mount
        (``mount_alive``) a file left without names is the mount's to free (:meth:`settle_orphans`)."""
        self.names.unlink(path)
        if self.mount_alive is not None:
            self.settle_orphans()

    def rename(self, old: bytes, new: bytes, flags: int = 0) -> None:
        """``renameat2``: atomic replace, directories with their subtree, NOREPLACE and EXCHANGE; beside a
        mount (``mount_alive``) a replaced file is the mount's to free (:meth:`settle_orphans`)."""
        self.names.rename(old, new, flags)
        if self.mount_alive is not None:
            self.settle_orphans()
