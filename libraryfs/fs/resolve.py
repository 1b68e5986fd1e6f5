"""Path resolution and the preconditions every operation of the view starts with.

:class:`Resolver` turns an absolute path (bytes, ``b"/section/entry.md"``) into a
:class:`~libraryfs.fs.nodes.Resolved`: one dirent lookup per component, the Library Theorem's path walk
(PAPERS.md §1), falling back to libfuse's in-memory hidden names and then to the generated namespace. It also
finds the inode an operation acts on (an open handle's, else a path's) and the parent directory of a name
to create or remove. :func:`require_writable` refuses changes on a read-only mount (EROFS), and
:class:`ViewService` is the state every service of the view that resolves paths starts from.
"""

from __future__ import annotations

import errno

from libraryfs.errors import AccessDenied, BadHandle, Busy, NameTooLong, NotADir, NotFound, Stale
from libraryfs.fs import schema as S
from libraryfs.fs.handles import HandleTable
from libraryfs.fs.nodes import Kind, Resolved
from libraryfs.fs.store import Store, Txn
from libraryfs.fs.virtual import VirtualNamespace


class ReadOnlyFS(AccessDenied):
    """A write on a ``--read-only`` mount (EROFS; refines AccessDenied's errno in the one errno table)."""

    errno = errno.EROFS


def require_writable(read_only: bool) -> None:
    """Raise :class:`ReadOnlyFS` (EROFS) when the mount is read-only."""
    if read_only:
        raise ReadOnlyFS()


def split_path(path: bytes) -> list[bytes]:
    """Components of an absolute path; raises :class:`NameTooLong` for a component over NAME_MAX."""
    parts = [p for p in path.split(b"/") if p and p != b"."]
    for p in parts:
        if len(p) > S.NAME_MAX:
            raise NameTooLong(f"name longer than {S.NAME_MAX} bytes")
    return parts


_REAL = Kind.REAL
SEEN_MAX = 4096  #: paths :attr:`Resolver.seen` keeps (a READDIRPLUS of a large directory remembers each)


class Resolver:
    """Resolves paths of one mount over ``store``; hidden names from ``handles``, generated names from
    ``virtual``."""

    def __init__(self, store: Store, virtual: VirtualNamespace, handles: HandleTable) -> None:
        self.store = store
        self.virtual = virtual
        self.handles = handles
        #: ``path → (snapshot id, Resolved)``: stored inodes resolved lately (:meth:`resolve_seen`)
        self.seen: dict[bytes, tuple[int, Resolved]] = {}

    def resolve_seen(self, t: Txn, path: bytes) -> Resolved:
        """:meth:`resolve`, answered without a lookup when ``path`` was resolved to a stored inode in the same
        snapshot (:meth:`Txn.snapshot <libraryfs.fs.store.Txn.snapshot>`: no commit since, by any process),
        as the kernel's OPEN right after its LOOKUP (getattr) of a cold name, or after a READDIRPLUS entry,
        asks it: same snapshot, same dirents, same inode record. Remembers what it resolves. Only results
        made from stored dirents alone are kept (no libfuse hidden name existed: those live in memory);
        the :class:`Resolved` is shared, so callers must not change its ``node`` (getattr and open read
        it). Raises as :meth:`resolve`."""
        snap = t.snapshot()
        if snap is None:
            return self.resolve(t, path)
        seen = self.seen
        hit = seen.get(path)
        if hit is not None and hit[0] == snap:
            return hit[1]
        r = self.resolve(t, path)
        if r.kind is _REAL and not self.handles.hidden:  # :meth:`remember`, inlined: on every LOOKUP
            if len(seen) >= SEEN_MAX:
                seen.clear()
            seen[path] = (snap, r)
        return r

    def remember(self, snap: int, path: bytes, r: Resolved) -> None:
        """Note that ``path`` resolves to the stored inode of ``r`` in snapshot ``snap`` (the caller read
        it there: :meth:`resolve_seen`, a READDIRPLUS entry). At most :data:`SEEN_MAX` paths are kept."""
        seen = self.seen
        if len(seen) >= SEEN_MAX:
            seen.clear()  # older snapshots' entries are useless anyway
        seen[path] = (snap, r)

    def resolve(self, t: Txn, path: bytes) -> Resolved:
        """Resolve an absolute path: one dirent lookup per component (the Library Theorem's path walk).

        Raises NotFound, NotADir (a component is not a directory), NameTooLong, Stale (ESTALE: a hidden name
        libfuse has unlinked, :attr:`HandleTable.retired <libraryfs.fs.handles.HandleTable.retired>`).
        """
        # The common case in raw lookups first, inline (this is the hottest path of the mount): every
        # component is a stored dirent. Dirents exist only under directories (invariant I2), so intermediate
        # inodes need no fetch. Anything else (a miss, a virtual or hidden name, ``.``/``..``, an over-long
        # name) falls through to the careful walk.
        get = t.getter(S.DB_DIRENTS)
        ino = S.ROOT_INO
        for name in path.split(b"/"):
            if not name:
                continue
            if name == b"." or name == b".." or len(name) > S.NAME_MAX:
                break
            raw = get(S.u64(ino) + name)
            if raw is None:
                break
            ino = S.from_u64(raw)
        else:
            node = t.inode(ino)
            if node is not None:
                return Resolved(Kind.REAL, ino, node)
        return self._walk(t, path)

    def _walk(self, t: Txn, path: bytes) -> Resolved:
        """The careful walk: checks every component, then hidden names, then the generated namespace."""
        parts = split_path(path)
        ino = S.ROOT_INO
        node = t.inode(ino)
        hidden = self.handles.hidden
        for i, name in enumerate(parts):
            if node is None:
                raise NotFound("no such file or directory")
            if not node.is_dir:
                raise NotADir("not a directory")
            child = t.lookup(ino, name)
            if child is None:
                child = hidden.get((ino, name)) if i == len(parts) - 1 else None
                if child is None:
                    if (ino, name) in self.handles.retired:  # a kernel node of a let-go hidden name
                        raise Stale("hidden name of a closed file")
                    return self.virtual.resolve(t, ino, parts, i)
            ino = child
            node = t.inode(ino)
        if node is None:
            raise NotFound("no such file or directory")
        return Resolved(Kind.REAL, ino, node)

    def parent_and_name(self, t: Txn, path: bytes) -> tuple[int, S.Inode, bytes]:
        """``(parent inode number, parent inode, last component)`` of a path to create or remove.

        Raises Busy (the root itself), AccessDenied (the parent is generated), NotADir, NotFound.
        """
        parts = split_path(path)
        if not parts:
            raise Busy("the root cannot be changed this way")
        r = self.resolve(t, b"/" + b"/".join(parts[:-1]))
        if not r.is_real:
            raise AccessDenied("generated files are read-only")
        node = r.node
        assert node is not None
        if not node.is_dir:
            raise NotADir("not a directory")
        return r.ino, node, parts[-1]

    def node_for(self, t: Txn, path: bytes | None, fh: int | None) -> S.Inode:
        """The real inode an operation acts on: the open handle's (works after unlink), else the path's.

        Raises AccessDenied for generated files, BadHandle with neither, NotFound if it is gone.
        """
        h = self.handles.file(fh)
        if h is not None:
            if h.virtual is not None:
                raise AccessDenied("generated files are read-only")
            node = t.inode(h.ino)
        else:
            if path is None:
                raise BadHandle("no path and no handle")
            r = self.resolve(t, path)
            if not r.is_real:
                raise AccessDenied("generated files are read-only")
            node = r.node
        if node is None:
            raise NotFound("no such file")
        return node


class ViewService:
    """Base of the view's services (names, attributes, file data, listings): the state they share.

    ``store`` is the library's store; ``resolver`` resolves paths, and brings the mount's ``handles``
    (:class:`~libraryfs.fs.handles.HandleTable`) and generated namespace ``virtual``
    (:class:`~libraryfs.fs.virtual.VirtualNamespace`); ``read_only`` refuses every change with EROFS.
    """

    def __init__(self, store: Store, resolver: Resolver, *, read_only: bool = False) -> None:
        self.store = store
        self.resolver = resolver
        self.handles = resolver.handles
        self.virtual = resolver.virtual
        self.read_only = read_only
