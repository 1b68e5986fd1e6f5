"""The FUSE adapter: path → one :class:`~libraryfs.fs.view.LibraryView` call → stat dict/bytes; errors → errno.

This is the only module importing ``mfusepy``. It translates and decides nothing about what the library
looks like (borg's ``hlfuse.py``). Known mfusepy 3.1 traps handled here (../shared/cases/POSIX.md):

* with libfuse3 its rename wrapper drops ``flags`` → :meth:`LibraryFUSE.rename_fuse_3` passes them on, so
  RENAME_NOREPLACE/RENAME_EXCHANGE are honoured (never silently a plain rename);
* its utimens ignores UTIME_NOW/UTIME_OMIT → :meth:`LibraryFUSE.utimens_fuse_3` decodes them;
* its readdir ignores ``FUSE_READDIR_PLUS`` (it fills only the type and inode number, so the kernel caches
  nothing from a listing) → :meth:`LibraryFUSE.readdir_fuse_3` fills every stored entry's full ``stat``;
  its getxattr reports an absent name only through an exception → :meth:`LibraryFUSE.getxattr` returns
  ``-ENODATA`` (``ls -l`` asks two absent names per entry);
* its truncate/chmod/chown wrappers drop the file handle → overridden so ``ftruncate``/``fchmod`` reach the
  open handle;
* ``hard_remove`` stays off: with it, libfuse forgets the path of a file unlinked while open and answers
  ``fstat`` on its descriptor with ESTALE itself (the kernel sends GETATTR without a handle). libfuse instead
  renames such a file to ``.fuse_hidden…``; the view turns that into a real unlink (C11);
* any uncaught exception would become EINVAL → every op maps domain errors through
  :func:`libraryfs.errors.to_errno`; anything unknown is logged and becomes EIO.

Threading: libfuse's single-threaded loop (``nothreads``), or with ``threads`` > 1 (``mount.threads``;
default :data:`DEFAULT_THREADS` = 1, the measured best on 2 cores) its multithreaded loop, where every
callback runs under the one :class:`~libraryfs.fs.serverlock.ServerLock` of :attr:`FuseOps.server_lock` (taken in
:meth:`LibraryFUSE._wrapper`, so also around libfuse-level wrappers and readdir generators): the Python
handlers run one at a time as in the single-threaded loop, while the workers' reads of ``/dev/fuse`` and
replies to the kernel overlap them,
and ``fsync`` waits for the store's group commit without the lock (:meth:`FuseOps.fsync`). Inside a request
``fuse_get_context`` is the calling worker's. The background work of a mount (TOC cache invalidation through
:meth:`FuseOps.invalidate`, the periodic sync) is :mod:`libraryfs.fs.mount`'s, which runs this module's
:func:`run`. Process control that needs libfuse itself (ending the loop from a signal handler thread) goes
through :func:`current_session` and :func:`exit_session`, so no other module touches mfusepy.

Length: over the ~500-line guideline (≈650) because it is the one module that imports mfusepy — the
operations (:class:`FuseOps`) and the libfuse-level wrappers (:class:`LibraryFUSE`: READDIRPLUS, getxattr,
getattr's stat copy) stay together behind that boundary; splitting them in two modules importing mfusepy is
the next step if it grows.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import threading
from collections import Counter, deque
from collections.abc import Callable

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would load libfuse2 if both exist

import mfusepy  # noqa: E402

from libraryfs.errors import LibraryError, to_errno  # noqa: E402
from libraryfs.fs.attrs import UTIME_NOW, UTIME_OMIT
from libraryfs.fs.serverlock import ServerLock
from libraryfs.fs.view import LibraryView
from libraryfs.settings_spec import SPEC

log = logging.getLogger("libraryfs.fuse")

#: FUSE worker threads of a mount by default (the ``mount.threads`` setting's default; docs/benchmarks.md
#: "Many agents at once")
DEFAULT_THREADS: int = SPEC["mount.threads"].default
_UTIME_NOW_NS = (1 << 30) - 1
_UTIME_OMIT_NS = (1 << 30) - 2

#: FuseOps methods that :class:`LibraryFUSE` calls and mfusepy does not know (wrapped like its operations)
OWN_CALLBACKS = ("readdir_plus", "find_xattr", "lseek")
FUSE_READDIR_PLUS = 1  #: libfuse3 ``enum fuse_readdir_flags``: the kernel asked READDIRPLUS
FUSE_FILL_DIR_PLUS = 2  #: libfuse3 ``enum fuse_fill_dir_flags``: this entry carries its full ``stat``

_NS = 10**9
_STAT_FIELDS = frozenset(name for name, *_ in mfusepy.c_stat._fields_)
_STAT_TIMES = {k: k + "spec" for k in ("st_atime", "st_mtime", "st_ctime")}  # mfusepy's timespec fields

_libfuse = mfusepy._libfuse
_libfuse.fuse_invalidate_path.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_libfuse.fuse_invalidate_path.restype = ctypes.c_int


def current_session() -> int:
    """The libfuse session (``struct fuse *``, as an int) of the request being served.

    Valid only inside a FUSE callback on the loop's thread, e.g. in ``init`` (``fuse_get_context(3)``).
    """
    return _libfuse.fuse_get_context().contents.fuse


def exit_session(session: int) -> None:
    """``fuse_exit(3)`` on ``session``: its loop returns once the request in flight is answered (the caller
    interrupts the loop's blocking read of /dev/fuse if it must return at once). Safe from any thread."""
    _libfuse.fuse_exit(ctypes.c_void_p(session))


def _op(fn: Callable) -> Callable:
    """Declare one FUSE operation: its name must be an mfusepy operation (checked at import), and it is
    wrapped so that a domain error becomes its errno and an unknown exception a logged EIO."""
    return _translated(mfusepy.overrides(mfusepy.Operations)(fn))


def _translated(fn: Callable) -> Callable:
    """``fn`` counted in :attr:`FuseOps.requests` and with errors translated as :func:`_op` says (also for
    the callbacks mfusepy does not know, e.g. :meth:`FuseOps.readdir_plus`)."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self, *args):
        """Call the op; translate errors (see :func:`_op`)."""
        self.requests[name] += 1
        try:
            return fn(self, *args)
        except mfusepy.FuseOSError:
            raise
        except LibraryError as e:
            raise mfusepy.FuseOSError(to_errno(e) or errno.EIO) from None
        except OSError as e:
            code = to_errno(e)
            if code is None:
                log.exception("FUSE %s failed", name)
            raise mfusepy.FuseOSError(code or errno.EIO) from None
        except Exception:
            log.exception("FUSE %s raised an unexpected exception; returning EIO", name)
            raise mfusepy.FuseOSError(errno.EIO) from None

    return wrapper


def _b(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def _fh(fi) -> int | None:
    if fi is None:
        return None
    if isinstance(fi, int):
        return fi
    return fi.fh


class FuseOps(mfusepy.Operations):
    """mfusepy operations over a :class:`LibraryView` (``raw_fi``: handles are ``fuse_file_info``)."""

    use_ns = True
    flag_nullpath_ok = True  # ops on open handles need no path
    flag_nopath = True

    def __init__(
        self,
        view: LibraryView,
        *,
        timeouts_s: tuple[float, float, float] = (1.0, 1.0, 1.0),
        on_init: Callable[[], None] | None = None,
    ) -> None:
        self.view = view
        self.timeouts_s = timeouts_s
        self.on_init = on_init
        self.fuse_ptr: int | None = None
        #: paths whose kernel caches must be dropped but not from inside a request (see :meth:`_refresh`)
        self.deferred: deque[bytes] = deque()
        #: ``seen(path bytes, ino)`` after every getattr by path (None: off, the default): the paths the
        #: kernel may cache, for invalidation by inode (:mod:`libraryfs.fs.remote_inval`)
        self.seen: Callable[[bytes, int], None] | None = None
        #: requests served per operation name (``readdir_plus``: READDIRPLUS requests), and
        #: ``readdirplus_attrs``: entries handed to the kernel with their attributes (``status.json``)
        self.requests: Counter[str] = Counter()
        #: held around every callback by :class:`LibraryFUSE` when several workers serve (set by :func:`run`;
        #: None: the single-threaded loop, no lock — about 0.8 µs per callback saved; module doc)
        self.server_lock: ServerLock | None = None

    # -- lifecycle --------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    def init_with_config(self, conn_info, config_3) -> None:
        """libfuse init: set entry/attr/negative timeouts, use_ino, nullpath_ok; keep the fuse handle. No
        ``auto_cache``: the view decides per open whether the kernel keeps cached pages (it would keep a
        generated file's stale pages whenever libfuse's copy of its attributes is younger than 1 s)."""
        if config_3 is not None:
            entry, attr, negative = self.timeouts_s
            config_3.entry_timeout = entry
            config_3.attr_timeout = attr
            config_3.negative_timeout = negative
            config_3.use_ino = 1
            config_3.hard_remove = 0  # see the module docstring: hidden names keep fstat working
            config_3.nullpath_ok = 1
            config_3.auto_cache = 0
        self.fuse_ptr = current_session()
        if self.on_init is not None:
            self.on_init()

    @mfusepy.overrides(mfusepy.Operations)
    def destroy(self, path) -> None:
        """libfuse destroy (unmount): free the files lingering under libfuse hidden names and the registered
        orphans no handle holds (an MCP server's replaced files, :meth:`LibraryView.reclaim_orphans`): at
        once, the kernel sends nothing more; then commit pending creates and sync the store so every commit
        survives an OS crash (a create that cannot be committed any more is logged by the view)."""
        try:
            self.view.files.expire_hidden(everything=True)
            self.view.files.reclaim_orphans(grace=False)
        except LibraryError:
            log.exception("could not free the orphans at unmount (the next mount does)")
        try:
            self.view.fsync()
        except LibraryError:
            self.view.fsync()  # the failed create was dropped and logged; sync the rest

    def invalidate(self, path: bytes) -> int:
        """Drop the kernel's cached attributes/pages of ``path`` (``fuse_invalidate_path``, libfuse ≥ 3.1)."""
        if not self.fuse_ptr:
            return -errno.ENOTCONN
        return _libfuse.fuse_invalidate_path(self.fuse_ptr, path)

    def _refresh(self, aliases: tuple[list[bytes], bool]) -> None:
        """Drop the kernel's cached attributes of a hard-linked file's other names (``view.aliases``): at
        once when that is safe, else through :attr:`deferred` (the mount's background thread)."""
        paths, now = aliases
        for p in paths:
            if now:
                self.invalidate(p)
            else:
                self.deferred.append(p)

    def take_deferred(self) -> list[bytes]:
        """The deferred paths to invalidate, removed from the queue (called by the mount's thread)."""
        out = []
        while self.deferred:
            out.append(self.deferred.popleft())
        return out

    # -- attributes ---------------------------------------------------------------------------------------
    @_op
    def getattr(self, path, fh=None):
        """stat(2)/fstat(2) → :meth:`LibraryView.getattr`; ENOENT, ENOTDIR."""
        attrs = self.view.getattr(_b(path), _fh(fh))
        if self.seen is not None and path is not None:
            self.seen(_b(path), attrs["st_ino"])
        return attrs

    @_op
    def chmod(self, path, mode, fh=None):
        """chmod(2)/fchmod(2) → :meth:`LibraryView.chmod`; EACCES on generated files, EROFS read-only."""
        self.view.chmod(_b(path), mode, _fh(fh))
        self._refresh(self.view.aliases(_b(path)))
        return 0

    @_op
    def chown(self, path, uid, gid, fh=None):
        """chown(2)/fchown(2) → :meth:`LibraryView.chown` (-1 keeps a value)."""
        self.view.chown(_b(path), uid, gid, _fh(fh))
        self._refresh(self.view.aliases(_b(path)))
        return 0

    @_op
    def utimens(self, path, times=None, fh=None):
        """utimensat(2) with UTIME_NOW/UTIME_OMIT decoded → :meth:`LibraryView.utimens`."""
        if times is None:
            atime = mtime = UTIME_NOW
        else:
            atime, mtime = times
        self.view.utimens(_b(path), atime, mtime, _fh(fh))
        self._refresh(self.view.aliases(_b(path)))
        return 0

    @_op
    def statfs(self, path):
        """statvfs(2) → :meth:`LibraryView.statfs`: LMDB pages in use plus the disk's free space."""
        return self.view.statfs()

    # -- directories ----------------------------------------------------------------------------------------
    @_op
    def opendir(self, path):
        """opendir(3) → a handle on a snapshot of the listing (stable readdir offsets)."""
        return self.view.opendir(_b(path))

    @_op
    def readdir_with_offset(self, path, offset, fh):
        """getdents(2) from ``offset``: ``(name, {st_mode, st_ino}, next offset)`` tuples."""
        # not a generator function itself: errors of view.readdir must surface inside _op
        entries = self.view.readdir(fh, offset)
        return (
            (os.fsdecode(name), {"st_mode": mode, "st_ino": ino}, nxt) for name, mode, ino, nxt in entries
        )

    @_translated
    def readdir_plus(self, path, offset, fh):
        """READDIRPLUS from ``offset``: ``(name bytes, type bits, ino, next offset, stat dict or None)`` per
        entry (:meth:`LibraryView.readdir_plus`); the kernel caches an entry with a ``stat`` as after a
        lookup, so :attr:`seen` learns its path as from :meth:`getattr`."""
        entries = self.view.readdir_plus(fh, offset)
        base = None
        if self.seen is not None:
            d = self.view.dir_path(fh)
            base = None if d is None else d.rstrip(b"/") + b"/"
        return _count_plus(self, entries, base)

    @_op
    def releasedir(self, path, fh):
        """closedir(3): forget the directory handle."""
        self.view.releasedir(fh)
        return 0

    @_op
    def mkdir(self, path, mode):
        """mkdir(2) → :meth:`LibraryView.mkdir`; EEXIST, ENOENT, ENAMETOOLONG."""
        uid, gid, _pid = mfusepy.fuse_get_context()
        self.view.mkdir(_b(path), mode, uid, gid)
        return 0

    @_op
    def mknod(self, path, mode, dev):
        """mknod(2) of FIFOs, sockets and device nodes (stored as inode + rdev)."""
        uid, gid, _pid = mfusepy.fuse_get_context()
        self.view.mknod(_b(path), mode, dev, uid, gid)
        return 0

    @_op
    def rmdir(self, path):
        """rmdir(2) → :meth:`LibraryView.rmdir`; ENOTEMPTY, ENOTDIR."""
        self.view.rmdir(_b(path))
        return 0

    @_op
    def fsyncdir(self, path, datasync, fh):
        """fsync(2) on a directory: sync the store (as :meth:`fsync`)."""
        _sync(self)
        return 0

    # -- files -----------------------------------------------------------------------------------------------
    @_op
    def create(self, path, mode, fi=None):
        """open(2) with O_CREAT → :meth:`LibraryView.create`; EEXIST with O_EXCL; FOPEN_DIRECT_IO for
        SQLite's logs (:meth:`LibraryView.direct_io`)."""
        uid, gid, _pid = mfusepy.fuse_get_context()
        p = _b(path)
        fi.fh = self.view.create(p, mode, fi.flags, uid, gid)
        if self.view.direct_io(p):
            fi.direct_io = 1
        return 0

    @_op
    def open(self, path, fi):
        """open(2) → :meth:`LibraryView.open`; FOPEN_DIRECT_IO / FOPEN_KEEP_CACHE as the view says."""
        fh, direct = self.view.open(_b(path), fi.flags)
        fi.fh = fh
        if direct:
            fi.direct_io = 1
        elif self.view.keep_cache(fh):
            fi.keep_cache = 1
        return 0

    @_op
    def read(self, path, size, offset, fi):
        """read(2) → :meth:`LibraryView.read` (counted per calling pid in stats.json; EDQUOT past a budget)."""
        _uid, _gid, pid = mfusepy.fuse_get_context()
        return self.view.read(fi.fh, size, offset, pid)

    @_translated
    def lseek(self, path, offset, whence, fh):
        """lseek(2) SEEK_DATA/SEEK_HOLE (FUSE_LSEEK, libfuse ≥ 3.8; the kernel sends no other whence) →
        :meth:`LibraryView.seek`: the next data or hole offset from the chunk map, ENXIO past the data or
        the end of file. Without it the kernel answers from the size alone: all data, no hole."""
        return self.view.seek(_fh(fh), offset, whence)

    @_op
    def write(self, path, data, offset, fi):
        """write(2) → :meth:`LibraryView.write` (O_APPEND honoured at the store's end of file)."""
        return self.view.write(fi.fh, data, offset)

    @_op
    def truncate(self, path, length, fh=None):
        """truncate(2)/ftruncate(2) (the handle is passed on for unlinked files) → :meth:`LibraryView.truncate`."""
        self.view.truncate(_b(path), length, _fh(fh))
        self._refresh(self.view.aliases(_b(path)))
        return 0

    @_op
    def fallocate(self, path, mode, offset, size, fi):
        """fallocate(2)/posix_fallocate(3) → :meth:`LibraryView.fallocate`; EOPNOTSUPP for other modes."""
        self.view.fallocate(_b(path), _fh(fi), mode, offset, size)
        self._refresh(self.view.aliases(_b(path)))
        return 0

    @_op
    def release(self, path, fi):
        """close(2) of the last reference → :meth:`LibraryView.release` (frees unlinked files)."""
        self.view.release(fi.fh)
        return 0

    @_op
    def fsync(self, path, datasync, fi):
        """fsync(2)/fdatasync(2): sync the store (durable against an OS crash); see :func:`_sync`."""
        _sync(self)
        return 0

    # -- names -------------------------------------------------------------------------------------------------
    @_op
    def unlink(self, path):
        """unlink(2) → :meth:`LibraryView.unlink` (open files keep their data); the other names of a
        hard-linked file get fresh attributes (nlink)."""
        aliases = self.view.aliases(_b(path))
        self.view.unlink(_b(path))
        self._refresh(aliases)
        return 0

    @_op
    def rename(self, old, new, flags=0):
        """renameat2(2) with NOREPLACE/EXCHANGE flags → :meth:`LibraryView.rename` (a replaced hard-linked
        target's other names get fresh attributes)."""
        replaced, moved = self.view.aliases(_b(new)), self.view.aliases(_b(old))
        self.view.rename(_b(old), _b(new), flags)
        self._refresh(replaced)
        self._refresh(moved)
        return 0

    @_op
    def symlink(self, target, source):
        """symlink(2): mfusepy passes (path of the new link, link content) → :meth:`LibraryView.symlink`."""
        # mfusepy: symlink(path of the new link, content of the link)
        uid, gid, _pid = mfusepy.fuse_get_context()
        self.view.symlink(_b(target), _b(source), uid, gid)
        return 0

    @_op
    def readlink(self, path):
        """readlink(2) → :meth:`LibraryView.readlink`; EINVAL if not a link."""
        return os.fsdecode(self.view.readlink(_b(path)))

    @_op
    def link(self, target, source):
        """link(2): mfusepy passes (new name, existing path) → :meth:`LibraryView.link`; EPERM for directories."""
        # mfusepy: link(path of the new name, existing path)
        self.view.link(_b(source), _b(target))
        # libfuse gives each name its own kernel inode: drop the cached nlink of the existing names
        self._refresh(self.view.aliases(_b(target)))
        return 0

    # -- xattrs -------------------------------------------------------------------------------------------------
    @_op
    def getxattr(self, path, name, position=0):
        """getxattr(2) → :meth:`LibraryView.getxattr`; ENODATA if absent, ENOTSUP outside user/trusted/security/system."""
        return self.view.getxattr(_b(path), _b(name))

    @_translated
    def find_xattr(self, path: bytes, name: bytes) -> bytes | None:
        """getxattr(2) as :class:`LibraryFUSE` calls it: the value, or None for ENODATA (no exception on
        the common answer); other errors as :meth:`getxattr`."""
        return self.view.find_xattr(path, name)

    @_op
    def listxattr(self, path):
        """listxattr(2) → :meth:`LibraryView.listxattr`."""
        return [os.fsdecode(n) for n in self.view.listxattr(_b(path))]

    @_op
    def setxattr(self, path, name, value, options, position=0):
        """setxattr(2) → :meth:`LibraryView.setxattr` (XATTR_CREATE/XATTR_REPLACE)."""
        self.view.setxattr(_b(path), _b(name), value, options)
        return 0

    @_op
    def removexattr(self, path, name):
        """removexattr(2) → :meth:`LibraryView.removexattr`; ENODATA if absent."""
        self.view.removexattr(_b(path), _b(name))
        return 0


def _sync(ops: FuseOps) -> None:
    """``fsync``/``fsyncdir``: commit the pending creates, then wait for a store sync that covers every commit
    so far with the server lock given up (other requests are served meanwhile; concurrent fsyncs share one
    sync, :meth:`Store.sync <libraryfs.fs.store.Store.sync>`). Without the lock (the single-threaded loop,
    tests calling the operations directly) the sync runs as it is."""
    ops.view.commit_pending()
    lock = ops.server_lock
    if lock is not None and lock.held():
        with lock.released():
            ops.view.store.sync()
    else:
        ops.view.store.sync()


def fill_stat(st, attrs: dict) -> None:
    """Write a ``stat`` dict (times in ns, as the view returns them) into mfusepy's ``c_stat`` ``st``: the same
    result as ``mfusepy.set_st_attrs(st, attrs, use_ns=True)`` (keys ``struct stat`` does not have are
    ignored) in about half its time; it runs for every getattr and every READDIRPLUS entry."""
    for key, val in attrs.items():
        ts = _STAT_TIMES.get(key)
        if ts is not None:
            t = getattr(st, ts)
            t.tv_sec, t.tv_nsec = divmod(int(val), _NS)
        elif key in _STAT_FIELDS:
            setattr(st, key, val)


def _count_plus(ops: FuseOps, entries, base: bytes | None):
    """``entries`` of :meth:`FuseOps.readdir_plus` passed through, counting those offered with attributes
    (``readdirplus_attrs``) and telling :attr:`FuseOps.seen` their paths (``base`` + name) when it is set."""
    for e in entries:
        if e[4] is not None:
            ops.requests["readdirplus_attrs"] += 1
            if base is not None:
                ops.seen(base + e[0], e[2])  # type: ignore[misc]
        yield e


#: ``threading.get_ident()`` of the threads :func:`_keep_thread_state` has run on
_KEPT: set[int] = set()


def _keep_thread_state() -> None:
    """Keep the calling thread's Python thread state until the process ends (call with the GIL, once per
    thread; :meth:`LibraryFUSE._wrapper` does).

    libfuse's worker threads were not started by Python: ctypes runs each callback on such a thread inside
    ``PyGILState_Ensure``/``PyGILState_Release``, which make a new thread state and delete it again every
    time — a cost per request, and every ``threading.local`` value (the term index's SQLite connection per
    thread, the etcd gateway's connections) would be lost after each request. One more ``PyGILState_Ensure``
    that is never released keeps the state: the callbacks' own pair then only takes and gives back the GIL
    (CPython ``PyGILState_Ensure(3)``). :func:`run` allows as many idle workers as workers, so libfuse ends
    none before the loop ends: at most ``threads`` states are kept."""
    _KEPT.add(threading.get_ident())
    ctypes.pythonapi.PyGILState_Ensure()


class LibraryFUSE(mfusepy.FUSE):
    """mfusepy's FUSE with the libfuse3 wrappers it gets wrong replaced (see module docstring), every
    callback under the operations' server lock when several workers serve."""

    def _wrapper(self, func, *args, **kwargs):
        """mfusepy's callback wrapper (errors → errno); with several workers inside
        ``operations.server_lock`` (module doc: Threading), on a thread whose Python thread state lives as
        long as the thread (:func:`_keep_thread_state`)."""
        lock = self.operations.server_lock
        if lock is None:  # the single-threaded loop
            return super()._wrapper(func, *args, **kwargs)
        with lock:
            if threading.get_ident() not in _KEPT:
                _keep_thread_state()
            return super()._wrapper(func, *args, **kwargs)

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        """libfuse3 rename with its ``flags`` passed on (mfusepy drops them)."""
        return self.operations.rename(
            old.decode(self.encoding, self.errors), new.decode(self.encoding, self.errors), flags
        )

    def readdir_fuse_3(self, path, buf, filler, offset, fip, flags) -> int:
        """libfuse3 readdir; for READDIRPLUS (``flags & FUSE_READDIR_PLUS``) each entry with attributes is
        filled with its full ``stat`` and ``FUSE_FILL_DIR_PLUS``, so libfuse hands the kernel a node id,
        the attributes and the entry/attribute timeouts, as a LOOKUP reply would (libfuse ``fill_dir_plus``;
        mfusepy fills only the type and inode number, with which the kernel caches nothing). libfuse 3.14
        counts a lookup for the entry that no longer fits the reply too (docs/posix.md: one node kept per
        such name until unmount)."""
        if not flags & FUSE_READDIR_PLUS:
            return super().readdir_fuse_3(path, buf, filler, offset, fip, flags)
        st = mfusepy.c_stat()
        size = ctypes.sizeof(st)
        for name, ftype, ino, nxt, attrs in self.operations.readdir_plus(
            self._p(path), offset, fip.contents.fh
        ):
            ctypes.memset(ctypes.addressof(st), 0, size)
            if attrs is None:
                st.st_mode, st.st_ino = ftype, ino
                fill = 0
            else:
                fill_stat(st, attrs)
                fill = FUSE_FILL_DIR_PLUS
            if filler(buf, name, st, nxt, fill) != 0:
                break  # the kernel's buffer is full; it asks again from the last offset
        return 0

    def lseek(self, path, offset: int, whence: int, fip) -> int:
        """libfuse3 ``lseek`` (the ``fuse_operations`` slot mfusepy 3.1 declares but has no wrapper for, so
        an operations object with ``lseek`` would make it raise): the handle passed on; returns the new
        offset or ``-errno`` through :meth:`_wrapper`."""
        return self.operations.lseek(self._p(path), offset, whence, self._fh_of(fip))

    def fgetattr(self, path, buf, fip) -> int:
        """libfuse getattr (mfusepy routes ``getattr_fuse_3`` here): the view's ``stat`` dict written with
        :func:`fill_stat` instead of mfusepy's slower generic copy."""
        ctypes.memset(buf, 0, ctypes.sizeof(mfusepy.c_stat))
        fh = fip.contents if fip else None
        attrs = self.operations.getattr(None if path is None else self._p(path), fh)
        fill_stat(buf.contents, attrs)
        return 0

    def getxattr(self, path: bytes, name: bytes, value, size: int, *args) -> int:
        """libfuse getxattr through :meth:`FuseOps.find_xattr`: an absent name is ``-ENODATA`` returned, not
        an exception raised and caught in three layers (``ls -l`` asks two absent names per entry)."""
        ret = self.operations.find_xattr(path, name)
        if ret is None:
            return -errno.ENODATA
        n = len(ret)
        if not value:
            return n  # a size query
        if n > size:
            return -errno.ERANGE
        ctypes.memmove(value, ret, n)
        return n

    def _fh_of(self, fip) -> int | None:
        return fip.contents.fh if fip else None

    def _p(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)

    def utimens_fuse_3(self, path, buf, fip) -> int:
        """libfuse3 utimens: UTIME_NOW/UTIME_OMIT kept as sentinels, the handle passed on."""
        if buf:

            def conv(ts):
                """A libfuse ``struct timespec`` as ns since the epoch, or the UTIME_NOW/UTIME_OMIT sentinel
                its ``tv_nsec`` carries (utimensat(2))."""
                if ts.tv_nsec == _UTIME_NOW_NS:
                    return UTIME_NOW
                if ts.tv_nsec == _UTIME_OMIT_NS:
                    return UTIME_OMIT
                return ts.tv_sec * 10**9 + ts.tv_nsec

            times = (conv(buf.contents.actime), conv(buf.contents.modtime))
        else:
            times = None
        return self.operations.utimens(self._p(path), times, self._fh_of(fip))

    def truncate_fuse_3(self, path, length, fip) -> int:
        """libfuse3 truncate with the file handle passed on (mfusepy drops it)."""
        return self.operations.truncate(self._p(path), length, self._fh_of(fip))

    def chmod_fuse_3(self, path, mode, fip) -> int:
        """libfuse3 chmod with the file handle passed on."""
        return self.operations.chmod(self._p(path), mode, self._fh_of(fip))

    def chown_fuse_3(self, path, uid, gid, fip) -> int:
        """libfuse3 chown with the file handle passed on (-1 kept for 'unchanged')."""
        if ctypes.c_uint32(uid + 1).value == 0:
            uid = -1
        if ctypes.c_uint32(gid + 1).value == 0:
            gid = -1
        return self.operations.chown(self._p(path), uid, gid, self._fh_of(fip))


def run(
    ops: FuseOps,
    mountpoint: str,
    *,
    foreground: bool = True,
    allow_other: bool = False,
    read_only: bool = False,
    debug: bool = False,
    fsname: str = "libraryfs",
    threads: int = DEFAULT_THREADS,
) -> None:
    """Mount ``ops`` at ``mountpoint`` and run the FUSE loop until unmounted (blocks): libfuse's multithreaded
    loop with at most ``threads`` workers (``-o max_threads,max_idle_threads``), or the single-threaded loop
    when ``threads`` is 1 (module doc: Threading).

    SIGTERM/SIGINT unmount cleanly (libfuse's handlers, unless the caller installed its own). Options:
    ``default_permissions`` (the kernel checks modes), ``allow_other`` only when asked (private to the owner
    by default), ``ro`` for read-only mounts. Raises ``RuntimeError`` when libfuse cannot mount, ValueError
    for ``threads`` < 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    if threads > 1:
        ops.server_lock = ServerLock()
        ops.view.serve_from(ops.server_lock.held, threads)  # any worker commits a pending create first
    kwargs = dict(
        foreground=foreground,
        nothreads=threads == 1,
        fsname=fsname,
        subtype="libraryfs",
        default_permissions=True,
    )
    if threads > 1:  # never more idle workers than workers: libfuse never ends one (_keep_thread_state)
        kwargs["max_threads"] = kwargs["max_idle_threads"] = threads
    if allow_other:
        kwargs["allow_other"] = True
    if read_only:
        kwargs["ro"] = True
    LibraryFUSE(ops, mountpoint, raw_fi=True, debug=debug, **kwargs)
