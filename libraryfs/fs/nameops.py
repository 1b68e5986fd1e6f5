"""The name operations of the view: every change to a directory's dirents.

:class:`NameOps` holds mkdir/rmdir, mknod, symlink/readlink, link, unlink and rename, and libfuse's
``.fuse_hidden`` rename (C11). They are one group because they share one shape: resolve the parent, check the
new name against the generated ones, add or drop a dirent, adjust ``nlink``, touch the parent directory (its
mtime and TOC generation, so the indexer sees the change) and write one journal record per name changed.
They change names and link counts, never file data (:mod:`libraryfs.fs.filedata`) or an inode's metadata
(:mod:`libraryfs.fs.attrs`). ``create`` lives with the file data because it also opens a handle; it uses
:func:`check_new_name` and :func:`add_child` from here.

Paths are absolute bytes, names raw bytes, times ns since the epoch; errors are :mod:`libraryfs.errors`
classes, whose errno follows the POSIX page named in each docstring. Behaviour against POSIX and pjdfstest:
``docs/posix.md``.
"""

from __future__ import annotations

import stat as _stat
import time
from dataclasses import dataclass

from libraryfs.errors import (
    AccessDenied,
    Exists,
    InvalidArgument,
    IsADir,
    LibraryError,
    NameTooLong,
    NotADir,
    NotEmpty,
    NotFound,
    NotPermitted,
)
from libraryfs.fs import schema as S
from libraryfs.fs.generated import INDEX_NAME
from libraryfs.fs.nodes import Kind, Resolved
from libraryfs.fs.resolve import ViewService, require_writable
from libraryfs.fs.store import Txn, now_ns
from libraryfs.fs.virtual import VirtualNamespace, set_index_claim

RENAME_NOREPLACE = 1  #: renameat2 flag: fail with EEXIST if the new name exists
RENAME_EXCHANGE = 2  #: renameat2 flag: swap the two names atomically
RENAME_WHITEOUT = 4  #: renameat2 flag (overlayfs): not supported, EINVAL

#: libfuse's high-level API renames a file that is unlinked while open to ``.fuse_hidden<16 hex digits>``
#: (``hard_remove`` off) so that it keeps a path: without one, ``fstat`` on the open descriptor gets ESTALE
#: (C11). The view turns that rename into a real unlink and keeps the hidden name only in memory.
HIDDEN_PREFIX = b".fuse_hidden"


def check_new_name(t: Txn, name: bytes, parent: int, virtual: VirtualNamespace) -> None:
    """Refuse ``name`` as a new dirent in directory inode ``parent``.

    Raises InvalidArgument (EINVAL: empty, ``.``, ``..``, or holding a NUL or ``/`` byte — the kernel never sends
    one, a caller of the view such as the MCP server could, and a stored one breaks ``readdir`` and ``check``
    finding I2), NameTooLong (over NAME_MAX bytes, ENAMETOOLONG); for a
    name the view generates there (``.index`` in a TOC directory; ``.libraryfs``/``.find``/``.catalogue`` at
    the root): Exists or AccessDenied (:meth:`VirtualNamespace.check_new_name`). ``INDEX.md`` is allowed: the
    user's own wins over the generated one.
    """
    if not name or name in (b".", b".."):
        raise InvalidArgument("invalid name")
    if b"\0" in name or b"/" in name:
        raise InvalidArgument("a name holds no NUL or '/' byte")
    if len(name) > S.NAME_MAX:
        raise NameTooLong(f"name longer than {S.NAME_MAX} bytes")
    virtual.check_new_name(t, name, parent)


def claim_on_removal(t: Txn, virtual: VirtualNamespace, pino: int, name: bytes) -> None:
    """After a stored ``INDEX.md`` left directory ``pino`` (unlink, rmdir, rename away), keep the name the
    user's: ``INDEX.md`` stays absent, as on any filesystem, and the generated TOC stays ``.index/INDEX.md``
    (git switching to a branch without the file, then back, must not find an "untracked" INDEX.md)."""
    if name == INDEX_NAME and virtual.tocs_here(t, pino):
        set_index_claim(t, pino, True)


def touch_dir(node: S.Inode, now: int) -> None:
    """Mark directory ``node`` changed at ``now`` (ns): mtime and ctime, and one more TOC generation."""
    node.mtime_ns = node.ctime_ns = now
    node.generation += 1


def new_inode(
    ino: int,
    pnode: S.Inode,
    mode: int,
    uid: int,
    gid: int,
    now: int,
    *,
    size: int = 0,
    rdev: int = 0,
    inherit_gid: bool = True,
) -> S.Inode:
    """A new inode ``ino`` of ``mode`` to be named in directory ``pnode``, times ``now`` (ns): in a
    set-group-ID directory it takes the directory's group and a new directory keeps the bit (Linux/BSD rule,
    open(2) "O_CREAT"), unless ``inherit_gid`` is False."""
    is_dir = mode & S.S_IFMT == S.S_IFDIR
    if inherit_gid and pnode.mode & _stat.S_ISGID:
        gid = pnode.gid
        if is_dir:
            mode |= _stat.S_ISGID
    return S.Inode(ino, mode, uid, gid, 2 if is_dir else 1, size, now, now, now, rdev=rdev)


def add_child(
    t: Txn,
    pino: int,
    pnode: S.Inode,
    name: bytes,
    mode: int,
    uid: int,
    gid: int,
    *,
    size: int = 0,
    rdev: int = 0,
    op: int = S.OP_CREATE,
    inherit_gid: bool = True,
) -> int:
    """Allocate an inode of ``mode`` and name it ``name`` in directory ``pino``; returns its number.

    The caller has resolved the parent and checked the name (:func:`check_new_name`, no existing dirent).
    One step of the caller's write transaction: inode, dirent (with its file type), parent times and
    ``nlink`` (a new directory adds one), journal record ``op``. In a set-group-ID directory the new inode
    takes the directory's group and a new directory keeps the bit (Linux/BSD rule, open(2) "O_CREAT"),
    unless ``inherit_gid`` is False.
    """
    now = now_ns()
    node = new_inode(t.alloc_ino(), pnode, mode, uid, gid, now, size=size, rdev=rdev, inherit_gid=inherit_gid)
    ino, mode = node.ino, node.mode
    is_dir = mode & S.S_IFMT == S.S_IFDIR
    t.put_inode(node)
    t.add_dirent(pino, name, ino, is_dir, mode)
    if is_dir:
        pnode.nlink += 1
    touch_dir(pnode, now)
    t.put_inode(pnode)
    t.journal(S.JournalRecord(op, ino, pino, name, now))
    return ino


class NameOps(ViewService):
    """mkdir/rmdir/mknod/unlink/rename/link/symlink/readlink over the store (module doc).

    State (:class:`~libraryfs.fs.resolve.ViewService`): the handle table says which inodes are open (an
    unlinked inode lives until its last close) and keeps libfuse's hidden names; the generated namespace
    answers for generated names. :attr:`hide_closed`: see :meth:`_hide`.
    """

    #: a rename to libfuse's hidden-name pattern of a file no handle has open is an unlink (the mount with
    #: several FUSE workers: :meth:`_hide`); off, it is an ordinary rename
    hide_closed = False
    #: this view does not serve the mount but may run beside one (the MCP server): a file losing its last
    #: name is never freed at once — a mount may hold it open — but kept with nlink 0 and registered in
    #: ``config[orphans]`` (:meth:`_last_name_gone`); off (the mount, offline tools), it is freed unless this
    #: view holds it open
    defer_free = False

    # ------------------------------------------------------------------------------------------------
    # directories
    def mkdir(self, path: bytes, mode: int, uid: int, gid: int) -> None:
        """Create a directory (mkdir(2)). Raises Exists, NotFound (parent), NotADir, NameTooLong."""
        require_writable(self.read_only)

        def fn(t: Txn) -> None:
            """The write transaction: add directory ``name`` (mode ``mode & 0o7777``) under its parent and
            journal it (OP_MKDIR); raises Exists (EEXIST), NameTooLong, InvalidArgument, AccessDenied (a
            generated name or parent), NotFound/NotADir (parent), Busy (the root)."""
            pino, pnode, name = self.resolver.parent_and_name(t, path)
            check_new_name(t, name, pino, self.virtual)
            if t.lookup(pino, name) is not None:
                raise Exists("file exists")
            add_child(t, pino, pnode, name, S.S_IFDIR | (mode & 0o7777), uid, gid, op=S.OP_MKDIR)

        self.store.run_write(fn)

    def rmdir(self, path: bytes) -> None:
        """Remove an empty directory (rmdir(2)). Raises NotEmpty, NotADir, NotFound, Busy (root)."""
        require_writable(self.read_only)

        def fn(t: Txn) -> None:
            """The write transaction: remove the empty directory's dirent and inode, drop the parent's
            nlink, claim ``INDEX.md`` if that was its name, journal it (OP_RMDIR); removing ``.index/``
            does nothing. Raises InvalidArgument (EINVAL, ``.``/``..``), AccessDenied (EACCES, generated),
            NotFound (ENOENT), NotADir (ENOTDIR), NotEmpty (ENOTEMPTY), Busy (EBUSY, the root)."""
            if self._removal_is_noop(t, path, want_dir=True):
                return  # like unlinking INDEX.md: nothing to remove, lets `rm -r` finish (C05)
            pino, pnode, name = self.resolver.parent_and_name(t, path)
            if name in (b".", b".."):
                raise InvalidArgument("cannot remove . or ..")
            child = t.lookup(pino, name)
            if child is None:
                if self.virtual.is_generated_name(t, name, pino):
                    raise AccessDenied("generated directory")
                raise NotFound("no such directory")
            node = t.inode(child)
            if node is None or not node.is_dir:
                raise NotADir("not a directory")
            if not t.dir_is_empty(child):
                raise NotEmpty("directory not empty")
            now = now_ns()
            t.del_dirent(pino, name)
            t.del_inode(child)
            claim_on_removal(t, self.virtual, pino, name)
            pnode.nlink -= 1
            touch_dir(pnode, now)
            t.put_inode(pnode)
            t.journal(S.JournalRecord(S.OP_RMDIR, child, pino, name, now))

        self.store.run_write(fn)

    # ------------------------------------------------------------------------------------------------
    # files, links and symlinks
    def mknod(self, path: bytes, mode: int, rdev: int, uid: int, gid: int) -> None:
        """``mknod(2)``: a regular file, FIFO, socket or device node (the kernel serves FIFOs, sockets and
        devices itself; the store keeps only the inode and ``rdev``). Raises Exists, InvalidArgument."""
        require_writable(self.read_only)
        kind = mode & S.S_IFMT
        if kind == 0:
            kind = S.S_IFREG
        if kind not in (S.S_IFREG, _stat.S_IFIFO, _stat.S_IFSOCK, _stat.S_IFCHR, _stat.S_IFBLK):
            raise InvalidArgument("mknod of this file type is not supported")
        if not 0 <= rdev < 1 << 32:
            raise InvalidArgument("device number does not fit the inode record")

        def fn(t: Txn) -> None:
            """The write transaction: add an inode of type ``kind`` (``rdev`` kept for devices only) as
            ``name`` under its parent and journal it; raises Exists (EEXIST), NameTooLong, InvalidArgument,
            AccessDenied (a generated name or parent), NotFound/NotADir (parent)."""
            pino, pnode, name = self.resolver.parent_and_name(t, path)
            check_new_name(t, name, pino, self.virtual)
            if t.lookup(pino, name) is not None:
                raise Exists("file exists")
            dev = rdev if kind in (_stat.S_IFCHR, _stat.S_IFBLK) else 0
            add_child(t, pino, pnode, name, kind | (mode & 0o7777), uid, gid, rdev=dev)

        self.store.run_write(fn)

    def symlink(self, path: bytes, target: bytes, uid: int, gid: int) -> None:
        """Create a symbolic link at ``path`` pointing to ``target`` (stored verbatim, never followed;
        symlink(2)). Raises Exists, NameTooLong (a target over 4096 bytes)."""
        require_writable(self.read_only)
        if len(target) > 4096:
            raise NameTooLong("symlink target too long")

        def fn(t: Txn) -> None:
            """The write transaction: add a symlink inode (mode 0777, size ``len(target)`` bytes, the target
            as its data) as ``name`` under its parent and journal it (OP_SYMLINK); raises Exists (EEXIST),
            NameTooLong, InvalidArgument, AccessDenied, NotFound/NotADir (parent)."""
            pino, pnode, name = self.resolver.parent_and_name(t, path)
            if t.lookup(pino, name) is not None:
                raise Exists("file exists")
            check_new_name(t, name, pino, self.virtual)
            mode = S.S_IFLNK | 0o777
            ino = add_child(
                t, pino, pnode, name, mode, uid, gid, size=len(target), op=S.OP_SYMLINK, inherit_gid=False
            )
            t.write_data(ino, 0, target)

        self.store.run_write(fn)

    def readlink(self, path: bytes) -> bytes:
        """Target of a symbolic link (readlink(2)). Raises InvalidArgument if not a link."""
        with self.store.read() as t:
            r = self.resolver.resolve(t, path)
            if not r.is_real:
                return self.virtual.readlink(r)
            node = r.node
            assert node is not None
            if not node.is_lnk:
                raise InvalidArgument("not a symbolic link")
            return t.read_data(r.ino, 0, node.size, node.size)

    def link(self, existing: bytes, new: bytes) -> None:
        """Hard link ``new`` to the file at ``existing``. Directories: EPERM (POSIX link(2))."""
        require_writable(self.read_only)

        def fn(t: Txn) -> int:
            """The write transaction: add dirent ``new`` for the inode of ``existing``, raise its nlink,
            set its ctime, journal it (OP_LINK); returns the inode number. Raises NotPermitted (EPERM, a
            directory or generated file), Exists (EEXIST), NotFound/NotADir, AccessDenied (link(2))."""
            r = self.resolver.resolve(t, existing)
            if not r.is_real:
                raise NotPermitted("cannot link generated files")
            node = r.node
            assert node is not None
            if node.is_dir:
                raise NotPermitted("hard links to directories are not allowed")
            pino, pnode, name = self.resolver.parent_and_name(t, new)
            if t.lookup(pino, name) is not None:
                raise Exists("file exists")
            check_new_name(t, name, pino, self.virtual)
            now = now_ns()
            node.nlink += 1
            node.ctime_ns = now
            t.put_inode(node)
            t.add_dirent(pino, name, node.ino, False)
            touch_dir(pnode, now)
            t.put_inode(pnode)
            t.journal(S.JournalRecord(S.OP_LINK, node.ino, pino, name, now))
            return node.ino

        ino = self.store.run_write(fn)
        self.handles.links.note(existing, ino)
        self.handles.links.note(new, ino)

    # ------------------------------------------------------------------------------------------------
    # removal
    def unlink(self, path: bytes) -> None:
        """Remove a name; an open file keeps its data until the last close (POSIX unlink(2)).

        Removing the generated ``INDEX.md`` claims the name for the user (``stat`` then says ENOENT, and a
        new ``INDEX.md`` can be created with ``O_EXCL``, as git checkout and tar do after an unlink); the TOC
        stays readable as ``.index/INDEX.md``. Removing a page of ``.index/`` succeeds and changes nothing
        (it is derived from the directory and comes back; C05).
        """
        require_writable(self.read_only)
        gone: list[tuple[int, int]] = []

        def fn(t: Txn) -> None:
            """The write transaction: drop the stored name (the inode goes with its last name unless open),
            claim a generated ``INDEX.md``, ignore a ``.index/`` page, or let a libfuse hidden name's file
            linger (noted in ``gone``: :meth:`FileData.expire_hidden
            <libraryfs.fs.filedata.FileData.expire_hidden>` frees it). Raises IsADir (EISDIR), AccessDenied
            (EACCES, generated), NotFound (ENOENT), NotADir, Busy (the root)."""
            gone.clear()
            walked = True
            try:  # the common case first: a stored dirent under a real directory (one path walk)
                pino, pnode, name = self.resolver.parent_and_name(t, path)
                child = t.lookup(pino, name)
            except LibraryError:  # the parent is generated, missing or the root: the careful order below
                walked, child = False, None
            if child is None:
                r = self._resolved_or_none(t, path)
                if r is not None and not r.is_real:
                    if r.kind is Kind.TOC:
                        self._claim_generated_index(t, r.ino)
                        return
                    if self.virtual.removal_is_noop(r, want_dir=False):
                        return
                if not walked:  # now raises the walk's own error (ENOENT, ENOTDIR, EBUSY for the root)
                    pino, pnode, name = self.resolver.parent_and_name(t, path)
                hino = self.handles.hidden.get((pino, name))
                if hino is not None:  # libfuse removes a hidden name after the last close: it lingers
                    if not self.handles.open_count(hino):
                        gone.append((pino, hino))
                    return
                if (pino, name) in self.handles.retired:  # libfuse's unlink of a name retired already
                    return
                if self.virtual.is_generated_name(t, name, pino):
                    raise AccessDenied("generated files are read-only")
                raise NotFound("no such file")
            node = t.inode(child)
            if node is None:
                t.del_dirent(pino, name)
                return
            if node.is_dir:
                raise IsADir("is a directory")
            self._drop_name(t, pino, pnode, name, node)

        self.store.run_write(fn)
        for _pino, hino in gone:  # its hidden name may still be sent by the kernel: the file lingers
            if not any(k in self.handles.linger for k in self.handles.hidden_names(hino)):
                self.handles.linger_ino(hino, time.monotonic())
        self.handles.links.forget(path)

    def _drop_name(
        self, t: Txn, pino: int, pnode: S.Inode, name: bytes, node: S.Inode, *, keep: bool = False
    ) -> None:
        """Remove dirent ``name`` of file ``node``; the inode goes with its last name unless it is open
        (:meth:`_last_name_gone`) or ``keep`` (a hidden name will reach it)."""
        now = now_ns()
        t.del_dirent(pino, name)
        claim_on_removal(t, self.virtual, pino, name)
        node.nlink -= 1
        node.ctime_ns = now
        if node.nlink <= 0 and not keep:
            self._last_name_gone(t, node)
        else:
            t.put_inode(node)
        touch_dir(pnode, now)
        t.put_inode(pnode)
        t.journal(S.JournalRecord(S.OP_UNLINK, node.ino, pino, name, now))

    def _last_name_gone(self, t: Txn, node: S.Inode) -> None:
        """File ``node`` (not a directory, nlink 0 now) lost its last name in ``t``: free it, unless a handle
        may still hold it open (POSIX unlink(2), rename(2): an open file lives until its last close) — one of
        this view's (freed at that close, :meth:`FileData.release <libraryfs.fs.filedata.FileData.release>`)
        or, with :attr:`defer_free`, a mount's that this view cannot see: then it is registered in
        ``config[orphans]`` (:meth:`FileData.reclaim_orphans <libraryfs.fs.filedata.FileData.reclaim_orphans>`
        frees it later)."""
        if self.handles.open_count(node.ino):
            t.put_inode(node)
        elif self.defer_free:
            t.put_inode(node)
            t.put_orphans(t.orphans() | {node.ino})
        else:
            t.del_inode(node.ino, is_dir=node.is_dir)

    def _claim_generated_index(self, t: Txn, dir_ino: int) -> None:
        """``unlink`` of the generated ``INDEX.md`` of directory ``dir_ino``: claim the name
        (:func:`claim_on_removal`), touch the directory and journal it so the indexer renders page 0 for
        ``.index/INDEX.md``. Raises AccessDenied (EACCES) for a TOC no stored directory owns.
        """
        pnode = t.inode(dir_ino)
        if pnode is None or not pnode.is_dir:  # the TOC of a generated tree (.catalogue/): nothing to claim
            raise AccessDenied("generated files are read-only")
        set_index_claim(t, dir_ino, True)
        now = now_ns()
        touch_dir(pnode, now)
        t.put_inode(pnode)
        t.journal(S.JournalRecord(S.OP_UNLINK, 0, dir_ino, INDEX_NAME, now))

    def _resolved_or_none(self, t: Txn, path: bytes) -> Resolved | None:
        """``path`` resolved, or None when it does not resolve (NotFound, NotADir)."""
        try:
            return self.resolver.resolve(t, path)
        except (NotFound, NotADir):
            return None

    def _names_generated(self, t: Txn, path: bytes) -> bool:
        """Whether ``path`` resolves to a generated object (not a stored inode)."""
        r = self._resolved_or_none(t, path)
        return r is not None and not r.is_real

    def _removal_is_noop(self, t: Txn, path: bytes, want_dir: bool) -> bool:
        """Whether removing ``path`` is removing a generated page or ``.index/`` (``want_dir``): no effect."""
        r = self._resolved_or_none(t, path)
        return r is not None and not r.is_real and self.virtual.removal_is_noop(r, want_dir)

    # ------------------------------------------------------------------------------------------------
    # rename
    def _hide(self, old: bytes, new: bytes) -> bool:
        """libfuse's rename of an open, unlinked-to-be file to ``.fuse_hidden…``: unlink it for real, keep
        the hidden name in memory only (ops on it reach the inode until libfuse unlinks it after the last
        close, and for :data:`~libraryfs.fs.handles.LINGER_S` more). Returns False when ``old`` is not a regular file or ``new`` exists, or when no handle has
        ``old`` open and :attr:`hide_closed` is off (then it is an ordinary rename).

        With :attr:`hide_closed` (the multithreaded mount), a file no handle has open any more is unlinked
        and lingers under its hidden name (:mod:`libraryfs.fs.handles`): with several FUSE workers, the
        last ``release`` can be served between libfuse's "is it open?" check of an ``unlink`` and this
        rename (libfuse takes no path lock for a release with ``nullpath_ok``), and libfuse then never
        unlinks the hidden name (its open count is already 0). As an ordinary rename it left a visible ``.fuse_hidden…`` file (found by
        ``bench/crash_run.py`` on the multithreaded server). There, a program renaming a closed file to
        exactly libfuse's pattern removes it."""

        def fn(t: Txn) -> tuple[int, bytes, int, bool] | None:
            """The write transaction: unlink ``old`` if it names a non-directory and ``new`` is free; returns
            ``(parent ino of new, its name, the inode number, whether it is open)``, or None to rename as
            usual."""
            sp, spn, sname = self.resolver.parent_and_name(t, old)
            dp, _dpn, dname = self.resolver.parent_and_name(t, new)
            src = t.lookup(sp, sname)
            if src is None or t.lookup(dp, dname) is not None:
                return None
            if not self.hide_closed and not self.handles.open_count(src):
                return None
            node = t.inode(src)
            if node is None or node.is_dir:
                return None
            self._drop_name(t, sp, spn, sname, node, keep=True)
            return dp, dname, src, self.handles.open_count(src) > 0

        res = self.store.run_write(fn)
        if res is None:
            return False
        self.handles.hidden[(res[0], res[1])] = res[2]
        if not res[3]:  # closed already: libfuse's node of the hidden name may still be sent, it lingers
            self.handles.linger_ino(res[2], time.monotonic())
        self.handles.links.forget(old)
        return True

    def rename(self, old: bytes, new: bytes, flags: int = 0) -> None:
        """``renameat2``: atomic replace, directories with their subtree, NOREPLACE and EXCHANGE.

        POSIX rename(2): EISDIR (file over directory), ENOTDIR (directory over file), ENOTEMPTY,
        EINVAL (directory into its own subtree, unknown flags), EEXIST (NOREPLACE), ENOENT.
        """
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or (
            flags & RENAME_NOREPLACE and flags & RENAME_EXCHANGE
        ):
            raise InvalidArgument("unsupported rename flags")
        require_writable(self.read_only)
        last = new.rstrip(b"/").rsplit(b"/", 1)[-1]
        if (
            not flags
            and last.startswith(HIDDEN_PREFIX)
            and len(last) == len(HIDDEN_PREFIX) + 16
            and all(c in b"0123456789abcdef" for c in last[len(HIDDEN_PREFIX) :])
            and self._hide(old, new)
        ):
            return

        self.store.run_write(lambda t: self.rename_in(t, old, new, flags))
        if flags & RENAME_EXCHANGE:
            self.handles.links.forget(old)
            self.handles.links.forget(new)
        else:
            self.handles.links.rename(old, new)

    def rename_in(self, t: Txn, old: bytes, new: bytes, flags: int = 0) -> None:
        """The write transaction of :meth:`rename`, as one step of the caller's transaction ``t``: exchange,
        replace or move ``old`` to ``new`` (a copy of the generated ``INDEX.md`` renamed onto it is absorbed
        instead), journalled as OP_RENAME. ``flags`` are checked by the caller. Raises NotFound (ENOENT),
        AccessDenied (EACCES, generated), InvalidArgument (EINVAL, into its own subtree), Exists (EEXIST,
        NOREPLACE), NotADir/IsADir/NotEmpty (a replaced target; rename(2))."""
        sp, spn, sname = self.resolver.parent_and_name(t, old)
        dp, dpn, dname = self.resolver.parent_and_name(t, new)
        src = t.lookup(sp, sname)
        if src is None:
            if self._names_generated(t, old):
                raise AccessDenied("generated files cannot be renamed")
            raise NotFound("no such file or directory")
        snode = t.inode(src)
        if snode is None:
            raise NotFound("dangling dirent")
        dst = t.lookup(dp, dname)
        if dst is None:
            check_new_name(t, dname, dp, self.virtual)
        if snode.is_dir and _is_ancestor(t, src, dp):
            raise InvalidArgument("cannot move a directory into itself")
        now = now_ns()
        src_end = _End(sp, spn, sname, src, snode)
        if flags & RENAME_EXCHANGE:
            self._exchange(t, src_end, _End(dp, dpn, dname, dst, None), now)
            return
        if dst is not None:
            if flags & RENAME_NOREPLACE:
                raise Exists("file exists")
            if dst == src:
                return  # POSIX: both names refer to the same file → nothing happens
            self._replace_target(t, snode, _End(dp, dpn, dname, dst, None), now)
        elif dname == INDEX_NAME and self.virtual.absorbs(t, dp, snode):
            # a copy of the generated page written back (rsync's temp file renamed into place)
            self._drop_name(t, sp, spn, sname, snode)
            set_index_claim(t, dp, False)
            return
        self._move(t, src_end, dp, dpn, dname, now)

    def _exchange(self, t: Txn, a: _End, b: _End, now: int) -> None:
        """RENAME_EXCHANGE at ``now`` (ns): swap the inodes named by ``a`` and ``b``. Raises NotFound,
        InvalidArgument."""
        if b.ino is None:
            raise NotFound("no such file or directory")
        bnode = t.inode(b.ino)
        if bnode is None:
            raise NotFound("dangling dirent")
        anode = a.node
        assert anode is not None and a.ino is not None
        if bnode.is_dir and _is_ancestor(t, b.ino, a.parent):
            raise InvalidArgument("cannot move a directory into itself")
        t.add_dirent(a.parent, a.name, b.ino, bnode.is_dir)
        t.add_dirent(b.parent, b.name, a.ino, anode.is_dir)
        if a.parent != b.parent:
            delta = int(anode.is_dir) - int(bnode.is_dir)
            a.pnode.nlink -= delta
            b.pnode.nlink += delta
        for n in (anode, bnode):
            n.ctime_ns = now
            t.put_inode(n)
        _touch_parents(t, a.pnode, b.pnode, a.parent, b.parent, now)
        t.journal(S.JournalRecord(S.OP_RENAME, a.ino, b.parent, b.name, now, a.parent, a.name))
        t.journal(S.JournalRecord(S.OP_RENAME, b.ino, a.parent, a.name, now, b.parent, b.name))

    def _replace_target(self, t: Txn, snode: S.Inode, dst: _End, now: int) -> None:
        """Drop the inode that the rename target ``dst`` names before ``snode`` replaces it (an open file
        lives on). Raises NotADir, IsADir, NotEmpty (POSIX rename(2))."""
        assert dst.ino is not None
        dnode = t.inode(dst.ino)
        if dnode is None:
            return
        if snode.is_dir and not dnode.is_dir:
            raise NotADir("not a directory")
        if not snode.is_dir and dnode.is_dir:
            raise IsADir("is a directory")
        if dnode.is_dir:
            if not t.dir_is_empty(dst.ino):
                raise NotEmpty("directory not empty")
            t.del_inode(dst.ino)
            dst.pnode.nlink -= 1
        else:
            dnode.nlink -= 1
            dnode.ctime_ns = now
            if dnode.nlink <= 0:
                self._last_name_gone(t, dnode)
            else:
                t.put_inode(dnode)
        t.journal(S.JournalRecord(S.OP_UNLINK, dst.ino, dst.parent, dst.name, now))

    def _move(self, t: Txn, src: _End, dp: int, dpn: S.Inode, dname: bytes, now: int) -> None:
        """Move the dirent ``src`` to ``dname`` in directory ``dp`` at ``now`` (ns; its old target is
        already dropped)."""
        snode = src.node
        assert snode is not None and src.ino is not None
        t.del_dirent(src.parent, src.name)
        claim_on_removal(t, self.virtual, src.parent, src.name)
        t.add_dirent(dp, dname, src.ino, snode.is_dir)
        if snode.is_dir and src.parent != dp:
            src.pnode.nlink -= 1
            dpn.nlink += 1
        snode.ctime_ns = now
        t.put_inode(snode)
        _touch_parents(t, src.pnode, dpn, src.parent, dp, now)
        t.journal(S.JournalRecord(S.OP_RENAME, src.ino, dp, dname, now, src.parent, src.name))


@dataclass(slots=True)
class _End:
    """One end of a rename: the dirent ``name`` in directory ``parent`` (inode record ``pnode``), naming
    inode ``ino`` (None: no such dirent) whose record is ``node`` (when fetched)."""

    parent: int
    pnode: S.Inode
    name: bytes
    ino: int | None
    node: S.Inode | None


def _touch_parents(t: Txn, spn: S.Inode, dpn: S.Inode, sp: int, dp: int, now: int) -> None:
    """Touch both parent directories of a rename (once when they are the same directory)."""
    if sp == dp:
        # the same directory resolved twice: merge the two copies' nlink changes
        base = t.inode(sp)
        assert base is not None
        base.nlink += (spn.nlink - base.nlink) + (dpn.nlink - base.nlink)
        touch_dir(base, now)
        t.put_inode(base)
    else:
        touch_dir(spn, now)
        touch_dir(dpn, now)
        t.put_inode(spn)
        t.put_inode(dpn)


def _is_ancestor(t: Txn, anc: int, ino: int) -> bool:
    """Whether directory ``anc`` is ``ino`` or one of its ancestors (following ``dirparent``)."""
    while True:
        if ino == anc:
            return True
        if ino == S.ROOT_INO:
            return False
        link = t.dirparent(ino)
        if link is None:
            return False
        ino = link[0]
