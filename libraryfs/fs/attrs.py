"""The metadata operations of the view: ``stat``, an inode's attributes and the volume's.

:class:`AttrOps` holds getattr, chmod/chown/utimens, the extended attributes (get/list/set/removexattr) and
statfs. They are one group because they change or report metadata only: no dirent, no link count, no file
data and no journal record, so the indexer never sees them (names are in :mod:`libraryfs.fs.nameops`, data
in :mod:`libraryfs.fs.filedata`). Generated files answer the read side through
:class:`~libraryfs.fs.virtual.VirtualNamespace` (``user.libraryfs.*`` freshness xattrs) and refuse the write
side with EACCES. Extended attribute names must be in a Linux namespace (``user.``, ``trusted.``,
``security.``, ``system.``; others are ENOTSUP as on ext4), and POSIX ACLs are ENOTSUP.

Paths are absolute bytes, xattr names and values raw bytes, times ns since the epoch; errors are
:mod:`libraryfs.errors` classes.
"""

from __future__ import annotations

import shutil
import stat as _stat
from collections.abc import Callable

from libraryfs.errors import (
    AccessDenied,
    BadHandle,
    Exists,
    InvalidArgument,
    NameTooLong,
    NoAttr,
    NotFound,
    NotSupported,
)
from libraryfs.fs import schema as S
from libraryfs.fs.nodes import inode_stat
from libraryfs.fs.pending import PendingCreates
from libraryfs.fs.resolve import Resolver, ViewService, require_writable
from libraryfs.fs.store import Store, Txn, now_ns

UTIME_NOW = "now"  #: sentinel for utimens: set to the current time (POSIX UTIME_NOW)
UTIME_OMIT = None  #: sentinel for utimens: leave unchanged (POSIX UTIME_OMIT)

XATTR_CREATE = 1  #: setxattr flag: fail with EEXIST if the attribute exists
XATTR_REPLACE = 2  #: setxattr flag: fail with ENODATA if the attribute does not exist
ACL_XATTR_PREFIX = b"system.posix_acl_"  #: system.posix_acl_access / _default: refused (ENOTSUP)
#: The Linux xattr namespaces (xattr(7)); a name in any other is ENOTSUP, as on ext4 and tmpfs.
XATTR_NAMESPACES = (b"user.", b"trusted.", b"security.", b"system.")


def check_namespace(name: bytes) -> None:
    """Raise NotSupported (ENOTSUP/EOPNOTSUPP) unless ``name`` is in a Linux xattr namespace
    (:data:`XATTR_NAMESPACES`): ``setfattr -n bogus.x`` fails as on ext4. An empty name passes (EINVAL is
    the caller's)."""
    if name and not name.startswith(XATTR_NAMESPACES):
        raise NotSupported("extended attribute names must start with user., trusted., security. or system.")


class AttrOps(ViewService):
    """getattr, chmod/chown/utimens, xattrs and statfs over the store (module doc).

    State: :class:`~libraryfs.fs.resolve.ViewService`'s (the handle table makes ``fstat``, ``fchmod``…
    work after unlink), and ``security_xattrs``: whether any ``security.*`` xattr was ever stored (config
    flag :data:`~libraryfs.fs.schema.CFG_SECURITY_XATTRS`); until one is, the kernel's per-write ``security.capability`` query
    is answered ENODATA without a store lookup.
    """

    def __init__(
        self,
        store: Store,
        resolver: Resolver,
        *,
        read_only: bool = False,
        pending: PendingCreates | None = None,
    ) -> None:
        super().__init__(store, resolver, read_only=read_only)
        #: the view's new files not yet in the store (:mod:`libraryfs.fs.pending`): their attributes change
        #: in memory, committed with the file
        self.pending = pending
        with store.read() as t:
            self.security_xattrs = t.cfg(S.CFG_SECURITY_XATTRS) == b"1"

    def getattr(self, path: bytes | None, fh: int | None = None) -> dict:
        """``stat`` of a path, or of an open handle (works after unlink; stat(2)/fstat(2)).

        Raises NotFound, NotADir, BadHandle (neither path nor a known handle).
        """
        with self.store.read() as t:
            h = self.handles.file(fh) if fh is not None else None  # a lookup by path: no handle
            if h is not None and (path is None or h.virtual is None):
                if h.virtual is not None:
                    return self.virtual.stat_snapshot(fh, len(h.virtual), h.vkey)  # type: ignore[arg-type]
                node = t.inode(h.ino)
                if node is None:
                    raise NotFound("stale handle")
                return inode_stat(node)
            if path is None:
                raise BadHandle("no path and no handle")
            r = self.resolver.resolve_seen(t, path)
            if r.is_real:
                node = r.node
                if node.nlink > 1 and not node.is_dir:  # type: ignore[union-attr]
                    self.handles.links.note(path, r.ino)  # its other names' caches go stale on changes
                return inode_stat(node)  # type: ignore[arg-type]
            return self.virtual.getattr(t, r)

    # ------------------------------------------------------------------------------------------------
    # chmod/chown/utimens
    def _modify(self, path: bytes | None, fh: int | None, change: Callable[[S.Inode], None]) -> None:
        """Apply ``change`` to the inode of ``path`` or ``fh`` and set its ctime, in one write; to a new file
        not yet in the store (SQLite's ``fchown`` of the journal it just created), in memory: it is stored
        with the file, by the file's first write or the next request that opens a transaction
        (:mod:`libraryfs.fs.pending`)."""
        require_writable(self.read_only)
        if self.pending is not None and self.pending.by_fh:
            node = self.pending.node_of(path, fh if self.handles.file(fh) is not None else None)
            if node is not None:
                change(node)
                node.ctime_ns = now_ns()
                return

        def fn(t: Txn) -> None:
            """The write transaction: apply ``change`` to the inode and set its ctime (ns); raises as
            :meth:`Resolver.node_for` (EACCES on generated files, EBADF, ENOENT)."""
            node = self.resolver.node_for(t, path, fh)
            change(node)
            node.ctime_ns = now_ns()
            t.put_inode(node)

        self.store.run_write(fn)

    def chmod(self, path: bytes | None, mode: int, fh: int | None = None) -> None:
        """Set permission bits (the file type bits are kept)."""

        def change(n: S.Inode) -> None:
            """Replace the permission bits of ``n`` with ``mode & 0o7777``, keeping its file type bits
            (chmod(2))."""
            n.mode = (n.mode & S.S_IFMT) | (mode & 0o7777)

        self._modify(path, fh, change)

    def chown(self, path: bytes | None, uid: int, gid: int, fh: int | None = None) -> None:
        """Set owner and group; -1 leaves one unchanged. Clears set-id bits of regular files (POSIX)."""

        def change(n: S.Inode) -> None:
            """Set ``uid``/``gid`` of ``n`` (-1 keeps one); on a regular file clear S_ISUID, and S_ISGID when
            group-executable (chown(2), POSIX)."""
            if uid != -1:
                n.uid = uid
            if gid != -1:
                n.gid = gid
            if n.is_reg and (uid != -1 or gid != -1):
                n.mode &= ~(_stat.S_ISUID | (_stat.S_ISGID if n.mode & 0o010 else 0))

        self._modify(path, fh, change)

    def utimens(self, path: bytes | None, atime, mtime, fh: int | None = None) -> None:
        """Set times in ns; each is an int, :data:`UTIME_NOW` or :data:`UTIME_OMIT` (utimensat(2))."""
        now = now_ns()

        def change(n: S.Inode) -> None:
            """Set atime/mtime of ``n`` in ns: the given value, the call's time for UTIME_NOW, unchanged for
            UTIME_OMIT (utimensat(2))."""
            if atime is not UTIME_OMIT:
                n.atime_ns = now if atime == UTIME_NOW else int(atime)
            if mtime is not UTIME_OMIT:
                n.mtime_ns = now if mtime == UTIME_NOW else int(mtime)

        self._modify(path, fh, change)

    # ------------------------------------------------------------------------------------------------
    # volume
    def statfs(self) -> dict:
        """``statvfs`` from real figures: LMDB pages in use plus the free space of the disk below it."""
        info = self.store.map_info()
        du = shutil.disk_usage(self.store.libdir)
        bsize = 4096
        used = info["used_bytes"]
        total = used + du.free
        with self.store.read() as t:
            files = t.count(S.DB_INODES)
        free_blocks = du.free // bsize
        return {
            "f_bsize": bsize,
            "f_frsize": bsize,
            "f_blocks": max(1, total // bsize),
            "f_bfree": free_blocks,
            "f_bavail": free_blocks,
            "f_files": files + free_blocks // 4,
            "f_ffree": free_blocks // 4,
            "f_favail": free_blocks // 4,
            "f_namemax": S.NAME_MAX,
        }

    # ------------------------------------------------------------------------------------------------
    # xattrs
    def getxattr(self, path: bytes, name: bytes) -> bytes:
        """Value of an extended attribute; generated files expose ``user.libraryfs.*`` freshness facts.
        Raises NoAttr (ENODATA) if absent, as :meth:`find_xattr` otherwise."""
        v = self.find_xattr(path, name)
        if v is None:
            raise NoAttr("no such attribute")
        return v

    def refresh_security_flag(self) -> None:
        """Re-read whether a ``security.*`` xattr was ever stored (another process or host may have stored
        one since this mount started; the mount's background thread calls this every pass until it is)."""
        if not self.security_xattrs:
            with self.store.read() as t:
                self.security_xattrs = t.cfg(S.CFG_SECURITY_XATTRS) == b"1"

    def find_xattr(self, path: bytes, name: bytes) -> bytes | None:
        """Value of an extended attribute, or None when absent (ENODATA without an exception: ``ls -l`` asks
        two absent names of every entry, the kernel one before every ``write(2)``).

        Answered without the store for names that cannot be stored here: ``security.*`` until one was
        (``security_xattrs``, re-read by :meth:`refresh_security_flag`: ``security.capability`` before each
        write, ``security.selinux`` from ``ls -l``), and POSIX ACLs (``system.posix_acl_*``, refused by :meth:`setxattr`; the kernel asks
        ``posix_acl_access`` for every entry ``ls -l`` shows). Raises NotFound, NotADir, NotSupported (a
        name outside the Linux namespaces)."""
        if name.startswith(b"security.") and not self.security_xattrs:
            return None
        if name.startswith(ACL_XATTR_PREFIX):
            return None
        check_namespace(name)
        with self.store.read() as t:
            r = self.resolver.resolve(t, path)
            if not r.is_real:
                try:
                    return self.virtual.getxattr(t, r, name)
                except NoAttr:
                    return None
            return t.getxattr(r.ino, name)

    def listxattr(self, path: bytes) -> list[bytes]:
        """Names of the extended attributes (a name outside the Linux namespaces, stored before they were
        checked, is not listed: it could be neither read nor removed)."""
        with self.store.read() as t:
            r = self.resolver.resolve(t, path)
            if not r.is_real:
                return self.virtual.listxattr(t, r)
            return [n for n in t.listxattr(r.ino) if n.startswith(XATTR_NAMESPACES)]

    def setxattr(self, path: bytes, name: bytes, value: bytes, flags: int) -> None:
        """Set an extended attribute (XATTR_CREATE → EEXIST if present, XATTR_REPLACE → ENODATA if not).

        Raises NotSupported for a name outside the Linux namespaces and for POSIX ACLs, InvalidArgument for an
        empty name or a value over 64 KiB, NameTooLong for a name over 255 bytes, AccessDenied on generated
        files.
        """
        require_writable(self.read_only)
        check_namespace(name)
        if name.startswith(ACL_XATTR_PREFIX):
            # No POSIX ACL support: storing the ACL as opaque bytes would ignore it for permission checks and
            # leave the mode bits unchanged (sed -i copies a file's mode with fsetxattr(posix_acl_access),
            # C04). ENOTSUP makes libacl fall back to fchmod.
            raise NotSupported("POSIX ACLs are not supported")
        if len(name) > 255 or not name:
            raise (
                InvalidArgument("bad attribute name") if not name else NameTooLong("attribute name too long")
            )
        if len(value) > 64 * 1024:
            raise InvalidArgument("attribute value too large")

        def fn(t: Txn) -> None:
            """The write transaction: store xattr ``name`` on the inode of ``path``, set its ctime, and note
            the first ``security.*`` xattr in the config; raises AccessDenied (EACCES) on generated files,
            Exists (EEXIST) under XATTR_CREATE, NoAttr (ENODATA) under XATTR_REPLACE (setxattr(2))."""
            r = self.resolver.resolve(t, path)
            if not r.is_real:
                raise AccessDenied("generated files are read-only")
            cur = t.getxattr(r.ino, name)
            if flags & XATTR_CREATE and cur is not None:
                raise Exists("attribute exists")
            if flags & XATTR_REPLACE and cur is None:
                raise NoAttr("no such attribute")
            t.setxattr(r.ino, name, value)
            if name.startswith(b"security.") and t.cfg(S.CFG_SECURITY_XATTRS) != b"1":
                t.put_cfg(S.CFG_SECURITY_XATTRS, b"1")
            node = r.node
            node.ctime_ns = now_ns()  # type: ignore[union-attr]
            t.put_inode(node)  # type: ignore[arg-type]

        self.store.run_write(fn)
        if name.startswith(b"security."):
            self.security_xattrs = True

    def removexattr(self, path: bytes, name: bytes) -> None:
        """Remove an extended attribute (ENODATA if absent, ENOTSUP outside the Linux namespaces)."""
        require_writable(self.read_only)
        check_namespace(name)

        def fn(t: Txn) -> None:
            """The write transaction: delete xattr ``name`` of the inode of ``path``; raises AccessDenied
            (EACCES) on generated files, NoAttr (ENODATA) if absent (removexattr(2))."""
            r = self.resolver.resolve(t, path)
            if not r.is_real:
                raise AccessDenied("generated files are read-only")
            if not t.delxattr(r.ino, name):
                raise NoAttr("no such attribute")

        self.store.run_write(fn)
