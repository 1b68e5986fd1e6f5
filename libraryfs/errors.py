"""The closed set of domain errors and the one table that maps them to errno (rclone's translateError).

Core code raises these; the FUSE adapter converts them with :func:`to_errno`; the CLI prints ``str(e)``.
Anything not in the table is a bug: the adapter logs it and returns EIO (never mfusepy's default EINVAL).
"""

from __future__ import annotations

import errno


class LibraryError(Exception):
    """Base of every domain error. ``str(e)`` is a one-line message for users; ``exit_code`` is the CLI's
    and the daemons' exit status for it (README "Exit status")."""

    errno = errno.EIO
    exit_code = 1


class NotFound(LibraryError):
    """A path component does not exist (ENOENT)."""

    errno = errno.ENOENT


class Stale(NotFound):
    """A path that named a file the view has since let go: one of libfuse's hidden names (``.fuse_hidden…``)
    after the last close of the file behind it (ESTALE).

    The kernel can still hold the node of that name (a path walk that found the old dentry just before a
    rename replaced the file, then sends OPEN or GETATTR by node id); libfuse's high-level API turns the
    node id into the hidden path. ESTALE, not ENOENT, makes Linux walk the path again once with
    ``LOOKUP_REVAL`` (``do_filp_open``, ``vfs_statx``: ``retry_estale``), which finds the name's current
    file, as libfuse itself answers ESTALE for a node that has lost its name. A subclass of
    :class:`NotFound`: code that treats a missing path as absent treats this one so too."""

    errno = errno.ESTALE


class Exists(LibraryError):
    """The name already exists (EEXIST)."""

    errno = errno.EEXIST


class NotADir(LibraryError):
    """A component used as a directory is not one (ENOTDIR)."""

    errno = errno.ENOTDIR


class IsADir(LibraryError):
    """A file operation was applied to a directory (EISDIR)."""

    errno = errno.EISDIR


class NotEmpty(LibraryError):
    """A directory to remove or replace has entries (ENOTEMPTY)."""

    errno = errno.ENOTEMPTY


class TooManyLinks(LibraryError):
    """Too many symbolic links while resolving a path (ELOOP)."""

    errno = errno.ELOOP


class NameTooLong(LibraryError):
    """A name component exceeds NAME_MAX = 255 bytes (ENAMETOOLONG)."""

    errno = errno.ENAMETOOLONG


class AccessDenied(LibraryError):
    """Writing a generated (read-only) file or into the control plane (EACCES)."""

    errno = errno.EACCES


class NotPermitted(LibraryError):
    """The operation is never allowed on this object (EPERM)."""

    errno = errno.EPERM


class InvalidArgument(LibraryError):
    """Bad flags or arguments, e.g. renaming a directory into itself (EINVAL)."""

    errno = errno.EINVAL


class NoSpace(LibraryError):
    """The disk holding the library is full; the LMDB map cannot grow (ENOSPC)."""

    errno = errno.ENOSPC


class NoAttr(LibraryError):
    """No such extended attribute (ENODATA, which Linux also calls ENOATTR)."""

    errno = errno.ENODATA


class NotSupported(LibraryError):
    """Operation not supported on this filesystem (ENOTSUP/EOPNOTSUPP)."""

    errno = errno.ENOTSUP


class CrossDevice(LibraryError):
    """Rename/link across namespaces that cannot share inodes (EXDEV)."""

    errno = errno.EXDEV


class QuotaExceeded(LibraryError):
    """A read budget given to the mount is spent (EDQUOT).

    Raised by :class:`libraryfs.fs.budget.ReadBudget` before anything is consumed. Optional facts of the
    refused charge: ``dimension`` (``"reads"`` or ``"tokens"``), ``used`` (before the charge),
    ``requested`` and ``limit``.
    """

    errno = errno.EDQUOT

    def __init__(
        self, message: str = "", *, dimension: str = "", used: int = 0, requested: int = 0, limit: int = 0
    ) -> None:
        super().__init__(message)
        self.dimension, self.used, self.requested, self.limit = dimension, used, requested, limit


class FileTooBig(LibraryError):
    """An offset or size beyond the maximum file size (EFBIG)."""

    errno = errno.EFBIG


class BadHandle(LibraryError):
    """Unknown or wrong-mode file handle (EBADF)."""

    errno = errno.EBADF


class NoSuchOffset(LibraryError):
    """``lseek`` SEEK_DATA/SEEK_HOLE from an offset at or past the end of file, or SEEK_DATA with no data
    after the offset (ENXIO; POSIX.1-2024 lseek, Linux lseek(2))."""

    errno = errno.ENXIO


class RangeError(LibraryError):
    """A buffer too small for the value (ERANGE)."""

    errno = errno.ERANGE


class Corrupt(LibraryError):
    """The store violates an invariant or cannot be decoded (EIO); run ``libraryfs check``."""

    errno = errno.EIO


class Damaged(Corrupt):
    """The store's file is damaged: truncated, a bad meta page, overwritten pages, or an engine error or
    crash while reading it (EIO). Every command says so in one line and exits with status 4
    (:data:`EXIT_DAMAGED`); ``libraryfs check --repair`` salvages what is readable into a new store."""

    errno = errno.EIO
    exit_code = 4


#: Exit status of every command and daemon that finds the library's store damaged (README "Exit status").
EXIT_DAMAGED = Damaged.exit_code


class SchemaMismatch(LibraryError):
    """The store's schema version is one this release cannot serve: newer than it knows, or older and not
    readable until migrated (a read-only open). The CLI and the daemons print it on one line and exit with
    status 1 (docs/architecture.md, "Store, schema and migrations")."""

    errno = errno.EIO


class LibraryMissing(LibraryError):
    """The library directory does not exist or is not a library (CLI error)."""


class Busy(LibraryError):
    """The library or mountpoint is in use (EBUSY)."""

    errno = errno.EBUSY


class Unavailable(LibraryError):
    """The store cannot be reached in bounded time, e.g. an etcd cluster without quorum (EIO). Every command
    and daemon says so in one line and exits with status 8 (:data:`EXIT_UNAVAILABLE`)."""

    errno = errno.EIO
    exit_code = 8


#: Exit status of every command and daemon that cannot reach the library's store (README "Exit status").
EXIT_UNAVAILABLE = Unavailable.exit_code


class ServerStopped(LibraryError):
    """The library's mount server is stopped (SIGSTOP, a debugger): every request to its mount, even
    ``statvfs``, would wait until it runs again, so ``status`` and ``umount`` say so without touching the
    mount and exit with status 9 (:data:`EXIT_STOPPED`)."""

    errno = errno.EAGAIN
    exit_code = 9


#: Exit status of ``status``/``umount``/``mount`` when the library's mount server is stopped (README).
EXIT_STOPPED = ServerStopped.exit_code


class IndexerStopping(Busy):
    """The library's indexer was asked to stop (SIGTERM) and has not exited yet: ``umount`` says so after
    its timeout instead of claiming a clean stop, and ``mount`` refuses to adopt it (it starts a fresh one
    once the old one exits); exit status 10 (:data:`EXIT_INDEXER_STOPPING`)."""

    exit_code = 10


#: Exit status of ``umount``/``mount`` when the library's indexer is still shutting down (README).
EXIT_INDEXER_STOPPING = IndexerStopping.exit_code


class Compacted(Unavailable):
    """A snapshot or watch revision older than the etcd cluster's compaction point (EIO).

    ``compact_revision`` is the oldest revision still available (0 if unknown); resync from a fresh read."""

    errno = errno.EIO

    def __init__(self, message: str, compact_revision: int = 0) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


#: The one domain-error → errno table (most specific class first is not needed: exact classes).
ERRNO_TABLE: dict[type[LibraryError], int] = {
    cls: cls.errno
    for cls in (
        NotFound,
        Stale,
        Exists,
        NotADir,
        IsADir,
        NotEmpty,
        NameTooLong,
        TooManyLinks,
        AccessDenied,
        NotPermitted,
        InvalidArgument,
        NoSpace,
        NoAttr,
        NotSupported,
        CrossDevice,
        QuotaExceeded,
        FileTooBig,
        BadHandle,
        NoSuchOffset,
        RangeError,
        Corrupt,
        Damaged,
        SchemaMismatch,
        LibraryMissing,
        Busy,
        Unavailable,
        Compacted,
        ServerStopped,
        IndexerStopping,
    )
}


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or a store's map) is full — an expected condition for a daemon, which
    reports it in one line and retries later: :class:`NoSpace`, an ``OSError`` with ENOSPC or EDQUOT, or
    SQLite's ``SQLITE_FULL`` ("database or disk is full", https://sqlite.org/rescode.html#full)."""
    if isinstance(exc, NoSpace):
        return True
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL


_SQLITE_FULL = 13  # sqlite3.SQLITE_FULL, without importing sqlite3 into every process that maps errors


def to_errno(exc: BaseException) -> int | None:
    """errno for a domain error (or an ``OSError`` with an errno); ``None`` for anything else (→ EIO)."""
    for cls in type(exc).__mro__:
        if cls in ERRNO_TABLE:
            # a private subclass may refine its parent's errno (e.g. EROFS for a read-only mount)
            return getattr(exc, "errno", None) or ERRNO_TABLE[cls]
    if isinstance(exc, OSError) and isinstance(exc.errno, int) and exc.errno > 0:
        return exc.errno
    return None
