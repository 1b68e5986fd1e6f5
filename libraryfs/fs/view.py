"""What the library looks like: POSIX semantics over the store (``LibraryView``).

Everything that decides what the mount shows lives in the view and is testable without a mount (borg's
``vfs.py`` beside ``hlfuse.py``); :mod:`libraryfs.fs.fuse_adapter` only translates. Paths are absolute bytes
(``b"/section/entry.md"``); names are raw bytes. Errors are :mod:`libraryfs.errors` classes.

:class:`LibraryView` is the one object the adapter calls; its operations live in three modules, by what they
change:

* this module, the POSIX core: path resolution (one dirent lookup per component), ``getattr``, the open-file
  and directory-handle tables, create/open/read/write/truncate/release/fsync, and orphans;
* :mod:`libraryfs.fs.nameops` (:class:`~libraryfs.fs.nameops.NameOps`): the dirents (mkdir/rmdir/mknod/unlink/
  rename/link/symlink/readlink) and libfuse's ``.fuse_hidden`` rename (C11);
* :mod:`libraryfs.fs.attrs` (:class:`~libraryfs.fs.attrs.AttrOps`): chmod/chown/utimens, xattrs, statfs.

Every path that does not name a stored dirent goes to :class:`~libraryfs.fs.virtual.VirtualNamespace`
(ARCHITECTURE §2): the generated ``INDEX.md`` and ``.index/`` TOC pages, the ``/.libraryfs/`` control plane,
``/.find/<term>/``, and the read accounting behind ``stats.json`` and ``budget``. The constants and helpers of
those modules that callers use are re-exported here: import them from ``libraryfs.fs.view``.

Generated files are served with ``direct_io`` and never from a stale kernel page cache; the mount
invalidates their attributes when the indexer commits (see :mod:`libraryfs.fs.fuse_adapter`). Writing them is
EACCES; removing them (``unlink INDEX.md``, ``rmdir .index``) succeeds without effect, so ``rm -r DIR``
works (C05). Behaviour against POSIX and pjdfstest: ``docs/posix.md``.
"""

from __future__ import annotations

import errno as _errno
import os
import stat as _stat
import time
from dataclasses import dataclass, field

from libraryfs.errors import (
    AccessDenied,
    BadHandle,
    Busy,
    Exists,
    FileTooBig,
    InvalidArgument,
    IsADir,
    NameTooLong,
    NotADir,
    NotFound,
)
from libraryfs.fs import schema as S

# Constants and helpers of the split-out operations, re-exported: callers import them from here.
from libraryfs.fs.attrs import (
    XATTR_REPLACE,  # noqa: F401
    AttrOps,
)
from libraryfs.fs.nameops import (
    NameOps,  # noqa: F401
    add_child,
)
from libraryfs.fs.nameops import (
    check_new_name as _check_new_name,
)
from libraryfs.fs.store import Store, Txn, now_ns

# Names of the generated namespace, re-exported: callers import them from here (fuse_adapter, library, tests).
from libraryfs.fs.virtual import (
    BLKSIZE,
    RESERVED_NAMES,  # noqa: F401
    Resolved,
    VirtualNamespace,
)


@dataclass
class Handle:
    """An open file: a real inode, or a snapshot of a generated file's bytes."""

    ino: int
    flags: int
    virtual: bytes | None = None  #: content of a generated file, fixed at open (consistent reads)
    kind: str = "entry"  #: "entry" | "toc" | "ctl"
    journaled: bool = False  #: a WRITE record for this handle is already in the journal
    wrote_after_journal: bool = False
    dir_path: bytes = b""
    read_any: bool = False
    toc_tokens: int = 0


@dataclass
class DirHandle:
    """An open directory: a snapshot of its listing (stable readdir offsets, ARCHITECTURE C05)."""

    entries: list[tuple[bytes, int, int]] = field(default_factory=list)  # (name, mode, ino)


def split_path(path: bytes) -> list[bytes]:
    """Components of an absolute path; raises :class:`NameTooLong` for a component over NAME_MAX."""
    parts = [p for p in path.split(b"/") if p and p != b"."]
    for p in parts:
        if len(p) > S.NAME_MAX:
            raise NameTooLong(f"name longer than {S.NAME_MAX} bytes")
    return parts


class LibraryView(NameOps, AttrOps):
    """POSIX filesystem semantics over a :class:`~libraryfs.fs.store.Store` (one instance per mount).

    ``finder`` and ``status_provider`` are optional callables supplied by higher layers (the daemon) so the
    view never imports them: ``finder(txn, term) -> list[bytes]`` returns matching absolute paths;
    ``status_provider() -> dict`` adds mount-process facts to ``status.json``. They, ``budget`` and
    ``count_tokens`` go to the :class:`~libraryfs.fs.virtual.VirtualNamespace` at ``self.virtual``. The name
    operations come from :class:`~libraryfs.fs.nameops.NameOps`, the metadata ones from
    :class:`~libraryfs.fs.attrs.AttrOps`; both run on this object's store and handle tables.
    """

    def __init__(
        self,
        store: Store,
        *,
        read_only: bool = False,
        finder=None,
        status_provider=None,
        budget=None,
        count_tokens=None,
    ) -> None:
        self.store = store
        self.read_only = read_only
        self.virtual = VirtualNamespace(
            store,
            read_only=read_only,
            finder=finder,
            status_provider=status_provider,
            budget=budget,
            count_tokens=count_tokens,
        )
        self.handles: dict[int, Handle] = {}
        self.dirs: dict[int, DirHandle] = {}
        self.open_count: dict[int, int] = {}
        self._next_fh = 1
        #: ``(parent ino, .fuse_hidden name) → ino`` of files unlinked while open (never stored, never listed)
        self.hidden: dict[tuple[int, bytes], int] = {}
        #: whether any ``security.*`` xattr was ever set: if not, the kernel's per-write
        #: ``security.capability`` query is answered ENODATA without a store lookup (libraryfs.fs.attrs)
        with store.read() as t:
            self.security_xattrs = t.cfg(S.CFG_SECURITY_XATTRS) == b"1"

    @property
    def stats(self):
        """Read counters per process (:class:`~libraryfs.fs.stats.ReadStats`, ``stats.json``)."""
        return self.virtual.stats

    @property
    def budget(self):
        """The read budget, or None (``budget`` control file)."""
        return self.virtual.budget

    @property
    def finder(self):
        """``finder(txn, term) -> list[bytes]`` behind ``/.find/``, or None."""
        return self.virtual.finder

    @property
    def status_provider(self):
        """``status_provider() -> dict`` of mount-process facts for ``status.json``, or None."""
        return self.virtual.status_provider

    @property
    def started_ns(self) -> int:
        """When this view was created (ns since the epoch): the times of the virtual objects."""
        return self.virtual.started_ns

    # ------------------------------------------------------------------------------------------------
    # resolution
    def resolve(self, t: Txn, path: bytes) -> Resolved:
        """Resolve an absolute path: one dirent lookup per component (the Library Theorem's path walk)."""
        fast = self._fast_resolve(t, path)
        if fast is not None:
            return fast
        parts = split_path(path)
        ino = S.ROOT_INO
        node = t.inode(ino)
        for i, name in enumerate(parts):
            if node is None:
                raise NotFound("no such file or directory")
            if not node.is_dir:
                raise NotADir("not a directory")
            child = t.lookup(ino, name)
            if child is None:
                child = self.hidden.get((ino, name)) if i == len(parts) - 1 else None
                if child is None:
                    return self.virtual.resolve(t, ino, parts, i)
            ino = child
            node = t.inode(ino)
        if node is None:
            raise NotFound("no such file or directory")
        return Resolved("real", ino, node)

    def _fast_resolve(self, t: Txn, path: bytes) -> Resolved | None:
        """The common case in raw lookups: every component is a stored dirent. Dirents exist only under
        directories (invariant I2), so intermediate inodes need no fetch. Anything else (a miss, a virtual
        or hidden name, ``.``/``..``, an over-long name) returns None for the careful walk to decide."""
        get = t.getter(S.DB_DIRENTS)
        ino = S.ROOT_INO
        for name in path.split(b"/"):
            if not name:
                continue
            if name == b"." or name == b".." or len(name) > S.NAME_MAX:
                return None
            raw = get(S.u64(ino) + name)
            if raw is None:
                return None
            ino = S.from_u64(raw)
        node = t.inode(ino)
        return None if node is None else Resolved("real", ino, node)

    def _parent_and_name(self, t: Txn, path: bytes) -> tuple[int, S.Inode, bytes]:
        parts = split_path(path)
        if not parts:
            raise Busy("the root cannot be changed this way")
        parent_path = b"/" + b"/".join(parts[:-1])
        r = self.resolve(t, parent_path)
        if r.kind != "real":
            raise AccessDenied("generated files are read-only")
        if not r.node.is_dir:  # type: ignore[union-attr]
            raise NotADir("not a directory")
        return r.ino, r.node, parts[-1]  # type: ignore[return-value]

    # ------------------------------------------------------------------------------------------------
    # attributes
    def _stat_real(self, node: S.Inode) -> dict:
        return {
            "st_ino": node.ino,
            "st_mode": node.mode,
            "st_nlink": node.nlink,
            "st_uid": node.uid,
            "st_gid": node.gid,
            "st_size": node.size,
            "st_atime": node.atime_ns,
            "st_mtime": node.mtime_ns,
            "st_ctime": node.ctime_ns,
            "st_blocks": (node.size + 511) // 512,
            "st_blksize": BLKSIZE,
            "st_rdev": node.rdev,
        }

    def getattr(self, path: bytes | None, fh: int | None = None) -> dict:
        """``stat`` of a path, or of an open handle (works after unlink). Raises NotFound/NotADir."""
        with self.store.read() as t:
            if fh is not None and fh in self.handles and (path is None or self.handles[fh].virtual is None):
                h = self.handles[fh]
                if h.virtual is not None:
                    return self.virtual.stat_snapshot(fh, len(h.virtual))
                node = t.inode(h.ino)
                if node is None:
                    raise NotFound("stale handle")
                return self._stat_real(node)
            if path is None:
                raise BadHandle("no path and no handle")
            return self._getattr_resolved(t, self.resolve(t, path))

    def _getattr_resolved(self, t: Txn, r: Resolved) -> dict:
        if r.kind == "real":
            return self._stat_real(r.node)  # type: ignore[arg-type]
        return self.virtual.getattr(t, r)

    # ------------------------------------------------------------------------------------------------
    # directory handles (mkdir/rmdir: libraryfs.fs.nameops)
    def opendir(self, path: bytes) -> int:
        """Snapshot a directory listing; returns a directory handle. Raises NotFound/NotADir."""
        with self.store.read() as t:
            r = self.resolve(t, path)
            entries: list[tuple[bytes, int, int]] = [(b".", S.S_IFDIR, 0), (b"..", S.S_IFDIR, 0)]
            if r.kind == "real":
                if not r.node.is_dir:  # type: ignore[union-attr]
                    raise NotADir("not a directory")
                entries.extend(self.virtual.dir_entries(t, r.ino))
                for name, child, ftype in t.iter_dir_typed(r.ino):
                    if ftype is None:  # a dirent written before file types were recorded
                        node = t.inode(child)
                        if node is None:
                            continue
                        ftype = node.mode & S.S_IFMT
                    entries.append((name, ftype, child))
            else:
                entries.extend(self.virtual.listdir(t, r))
        fh = self._new_fh()
        self.dirs[fh] = DirHandle(entries)
        return fh

    def readdir(self, fh: int, offset: int):
        """Entries ``(name, type bits, ino, next offset)`` from ``offset`` of an open directory handle."""
        d = self.dirs.get(fh)
        if d is None:
            raise BadHandle("bad directory handle")
        entries = d.entries

        def gen():
            # lazy: the kernel's buffer fills after ~100 entries; a listing costs O(entries consumed)
            for k in range(offset, len(entries)):
                n, m, i = entries[k]
                yield n, m, i, k + 1

        return gen()

    def releasedir(self, fh: int) -> None:
        """Forget a directory handle."""
        self.dirs.pop(fh, None)

    # ------------------------------------------------------------------------------------------------
    # files
    def create(self, path: bytes, mode: int, flags: int, uid: int, gid: int) -> int:
        """``open(O_CREAT)``: create (or, without O_EXCL, open) a regular file; returns a handle."""
        self._writable()

        def fn(t: Txn) -> tuple[int, bool]:
            pino, pnode, name = self._parent_and_name(t, path)
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
                    self._truncate_node(t, node, 0, pino, name)
                return existing, False
            _check_new_name(t, name, pino)
            return add_child(t, pino, pnode, name, S.S_IFREG | (mode & 0o7777), uid, gid), True

        ino, _created = self.store.run_write(fn)
        return self._open_handle(ino, flags)

    def open(self, path: bytes, flags: int) -> tuple[int, bool]:
        """Open a file; returns ``(handle, direct_io)``. ``direct_io`` is True for generated files.

        O_TRUNC is applied here (libfuse3 passes it with atomic_o_trunc). Writing a generated file raises
        AccessDenied; opening a directory for writing raises IsADir.
        """
        acc = flags & os.O_ACCMODE
        with self.store.read() as t:
            r = self.resolve(t, path)
            if r.kind != "real":
                content, kind, toc_tokens = self.virtual.open(t, r, flags)
                fh = self._new_fh()
                dir_path = b"%d/%d" % (r.ino, r.page) if kind == "toc" else b""
                self.handles[fh] = Handle(0, flags, content, kind, dir_path=dir_path, toc_tokens=toc_tokens)
                return fh, True
            node = r.node
            assert node is not None
            if node.is_dir and acc != os.O_RDONLY:
                raise IsADir("is a directory")
        if acc != os.O_RDONLY or flags & os.O_TRUNC:
            self._writable()
        if flags & os.O_TRUNC and acc != os.O_RDONLY and node.is_reg and node.size:

            def fn(t: Txn) -> None:
                n = t.inode(node.ino)
                if n is not None:
                    self._truncate_node(t, n, 0, 0, b"")

            self.store.run_write(fn)
        return self._open_handle(node.ino, flags), False

    def _open_handle(self, ino: int, flags: int) -> int:
        fh = self._new_fh()
        self.handles[fh] = Handle(ino, flags)
        self.open_count[ino] = self.open_count.get(ino, 0) + 1
        return fh

    def read(self, fh: int, size: int, offset: int, pid: int = 0) -> bytes:
        """Up to ``size`` bytes at ``offset`` (short at EOF). Counts the read for ``pid`` (stats.json)."""
        h = self.handles.get(fh)
        if h is None:
            raise BadHandle("bad file handle")
        if h.virtual is not None:
            data = h.virtual[offset : offset + size]
            if h.kind == "toc" and not h.read_any and data:
                h.read_any = True
                self.virtual.charge_toc(pid, len(data), h.toc_tokens)
            elif data:
                self.virtual.count_bytes(pid, len(data))
            return data
        with self.store.read() as t:
            node = t.inode(h.ino)
            if node is None:
                raise BadHandle("file vanished")
            if node.is_lnk or node.is_dir:
                raise IsADir("not a regular file")
            data = t.read_data(h.ino, offset, size, node.size)
            if data:
                self.virtual.charge_entry(t, h.ino, node.size, len(data), pid, first=not h.read_any)
                h.read_any = True
        return data

    def write(self, fh: int, data: bytes, offset: int) -> int:
        """Write at ``offset`` (at the store's end of file when the handle has O_APPEND); returns bytes."""
        h = self.handles.get(fh)
        if h is None:
            raise BadHandle("bad file handle")
        if h.virtual is not None:
            raise AccessDenied("generated files are read-only")
        if h.flags & os.O_ACCMODE == os.O_RDONLY:
            raise BadHandle("file not open for writing")
        self._writable()

        def fn(t: Txn) -> int:
            node = t.inode(h.ino)
            if node is None:
                raise BadHandle("file vanished")
            off = node.size if h.flags & os.O_APPEND else offset
            end = off + len(data)
            if end > S.MAX_FILE_SIZE:
                raise FileTooBig("file too large")
            t.write_data(h.ino, off, data)
            now = now_ns()
            node.size = max(node.size, end)
            node.mtime_ns = node.ctime_ns = now
            node.generation += 1
            if node.mode & (_stat.S_ISUID | _stat.S_ISGID):
                node.mode &= ~(_stat.S_ISUID | _stat.S_ISGID)  # POSIX: writing clears set-id bits
            t.put_inode(node)
            if not h.journaled:
                t.journal(S.JournalRecord(S.OP_WRITE, h.ino, 0, b"", now))
                h.journaled = True
            else:
                h.wrote_after_journal = True
            return len(data)

        return self.store.run_write(fn)

    def truncate(self, path: bytes | None, length: int, fh: int | None = None) -> None:
        """Set a file's size (``truncate``/``ftruncate``); growing makes a hole. Raises IsADir, AccessDenied."""
        if length < 0:
            raise InvalidArgument("negative length")
        if length > S.MAX_FILE_SIZE:
            raise FileTooBig("file too large")
        self._writable()

        def fn(t: Txn) -> None:
            node = self._node_for(t, path, fh)
            if node.is_dir:
                raise IsADir("is a directory")
            if not node.is_reg:
                raise InvalidArgument("not a regular file")
            self._truncate_node(t, node, length, 0, b"")

        self.store.run_write(fn)

    def _node_for(self, t: Txn, path: bytes | None, fh: int | None) -> S.Inode:
        """The real inode an operation acts on: the open handle's (works after unlink), else the path's.

        Raises AccessDenied for generated files, BadHandle with neither, NotFound if it is gone."""
        h = self.handles.get(fh) if fh is not None else None
        if h is not None:
            if h.virtual is not None:
                raise AccessDenied("generated files are read-only")
            node = t.inode(h.ino)
        else:
            if path is None:
                raise BadHandle("no path and no handle")
            r = self.resolve(t, path)
            if r.kind != "real":
                raise AccessDenied("generated files are read-only")
            node = r.node
        if node is None:
            raise NotFound("no such file")
        return node

    def _truncate_node(self, t: Txn, node: S.Inode, length: int, parent: int, name: bytes) -> None:
        t.truncate_data(node.ino, node.size, length)
        now = now_ns()
        node.size = length
        node.mtime_ns = node.ctime_ns = now
        node.generation += 1
        t.put_inode(node)
        t.journal(S.JournalRecord(S.OP_WRITE, node.ino, parent, name, now))

    def release(self, fh: int) -> None:
        """Close a handle; the last close of an unlinked file frees its inode."""
        h = self.handles.pop(fh, None)
        if h is None or h.virtual is not None:
            return
        n = self.open_count.get(h.ino, 1) - 1
        if n <= 0:
            self.open_count.pop(h.ino, None)
        else:
            self.open_count[h.ino] = n
        unlinked = False
        if n <= 0 and not h.wrote_after_journal:
            # the last close frees an unlinked file; only then is a write transaction needed
            with self.store.read() as t:
                node = t.inode(h.ino)
                unlinked = node is not None and node.nlink == 0
        if h.wrote_after_journal or unlinked:

            def fn(t: Txn) -> None:
                node = t.inode(h.ino)
                if node is None:
                    return
                if node.nlink == 0 and n <= 0:
                    t.del_inode(h.ino)
                elif h.wrote_after_journal:
                    t.journal(S.JournalRecord(S.OP_WRITE, h.ino, 0, b"", now_ns()))

            if not self.read_only:
                self.store.run_write(fn)

    def fsync(self, fh: int | None = None) -> None:
        """Make every committed change durable against an OS crash (LMDB fsync)."""
        self.store.sync()

    def status(self, t: Txn) -> dict:
        """The facts of ``.libraryfs/status.json`` (indexer status, journal backlog, TOC generation)."""
        return self.virtual.status(t)

    # ------------------------------------------------------------------------------------------------
    def _new_fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    def _writable(self) -> None:
        if self.read_only:
            raise _ReadOnlyFS()

    def purge_orphans(self) -> int:
        """Delete inodes left with nlink 0 by a crash while they were open; returns how many."""

        def fn(t: Txn) -> int:
            dead = [n.ino for n in t.iter_inodes() if n.nlink == 0 and not n.is_dir]
            for ino in dead:
                t.del_inode(ino)
            return len(dead)

        return self.store.run_write(fn)


class _ReadOnlyFS(AccessDenied):
    """A write on a ``--read-only`` mount (EROFS)."""

    errno = _errno.EROFS


def monotonic_s() -> float:
    """Monotonic clock in seconds (for uptime)."""
    return time.monotonic()
