"""Directory listings of the view: opendir/readdir/releasedir.

``opendir`` snapshots the whole listing into a directory handle: the stored dirents in name-byte order. The
generated names of a real directory (``INDEX.md``, ``.index``, and at the root ``.libraryfs``, ``.find`` and
``.catalogue``) are resolved by lookup only and never listed, so tools that walk a tree see only what is
stored (issue 14: ``cp -a``, ``rsync --delete``, ``tar``, ``diff -r``, ``git status``;
:mod:`libraryfs.fs.virtual`). A virtual directory (``.index/``, ``/.libraryfs/``, ``/.find/<term>/``,
``/.catalogue/``) lists its generated entries. ``readdir`` walks the snapshot from an offset, so offsets stay
stable while the directory
changes (ARCHITECTURE C05; readdir(3) and seekdir(3) semantics). Entries are ``(name bytes, type bits of
``st_mode``, ino)``; ``.`` and ``..`` carry the directory's and its parent's inode numbers.

``readdir_plus`` serves the kernel's READDIRPLUS (fuse(4); libfuse's ``FUSE_READDIR_PLUS``): each entry also
carries its full ``stat`` as of that request, so the kernel caches the entry and its attributes from the
listing and sends no LOOKUP per name afterwards (``ls -l``, ``find``, ``rg`` walking a tree). An entry gets
attributes only when they are exactly what a lookup of the name would answer at that moment: its dirent
still names the same inode (the snapshot may be older than a rename or unlink), the inode exists, and it
is not a hard-linked file (a lookup of one records the name for alias invalidation,
:mod:`libraryfs.fs.aliases`). Generated directories and ``.``/``..`` get none. The kernel keeps these
attributes for the attribute timeout, exactly as after a lookup; every invalidation that covers a looked-up
name (hard links, the indexer's TOC pages, another host's journal records) covers them too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from libraryfs.errors import BadHandle, NotADir
from libraryfs.fs import schema as S
from libraryfs.fs.nodes import Kind, Resolved, inode_stat
from libraryfs.fs.resolve import ViewService
from libraryfs.fs.store import Txn


class DirListing(ViewService):
    """opendir/readdir/releasedir over the store (:class:`~libraryfs.fs.resolve.ViewService`'s state:
    directory handles in the handle table, generated names from the namespace)."""

    def opendir(self, path: bytes) -> int:
        """Snapshot a directory listing; returns a directory handle. Raises NotFound/NotADir."""
        with self.store.read() as t:
            r = self.resolver.resolve(t, path)
            if r.is_real:
                if not r.node.is_dir:  # type: ignore[union-attr]
                    raise NotADir("not a directory")
                link = t.dirparent(r.ino)
                entries = _dots(r.ino, S.ROOT_INO if link is None else link[0])
                entries.extend(_stored_entries(t, r.ino))
                return self.handles.open_dir(entries, r.ino)
            entries = _dots(*self.virtual.dir_inos(t, r))
            entries.extend(self.virtual.listdir(t, r))
        return self.handles.open_dir(entries)

    def readdir(self, fh: int, offset: int) -> Iterator[tuple[bytes, int, int, int]]:
        """Entries ``(name, type bits, ino, next offset)`` from ``offset`` of an open directory handle.

        Raises BadHandle at once for an unknown handle; the entries themselves are produced lazily.
        """
        d = self.handles.dir(fh)
        if d is None:
            raise BadHandle("bad directory handle")
        entries = d.entries

        def gen() -> Iterator[tuple[bytes, int, int, int]]:
            """Yield ``(name, type bits, ino, next offset)`` for the handle's entries from ``offset`` on."""
            # lazy: the kernel's buffer fills after ~100 entries; a listing costs O(entries consumed)
            for k in range(offset, len(entries)):
                n, m, i = entries[k]
                yield n, m, i, k + 1

        return gen()

    def readdir_plus(self, fh: int, offset: int) -> Iterator[tuple[bytes, int, int, int, dict | None]]:
        """Entries ``(name, type bits, ino, next offset, stat dict or None)`` from ``offset`` (module doc: which
        entries get a ``stat``, as :meth:`getattr` would answer it; None: the kernel looks the name up).

        Raises BadHandle at once for an unknown handle. Attributes are read per batch of entries in one read
        transaction, batches doubling from :data:`PLUS_BATCH` (the kernel's buffer takes a few dozen)."""
        d = self.handles.dir(fh)
        if d is None:
            raise BadHandle("bad directory handle")
        entries, dir_ino = d.entries, d.ino

        def gen() -> Iterator[tuple[bytes, int, int, int, dict | None]]:
            """Yield the entries of the handle from ``offset`` with their attributes, batch by batch."""
            k, batch = offset, PLUS_BATCH
            while k < len(entries):
                end = min(k + batch, len(entries))
                if dir_ino:
                    with self.store.read() as t:
                        seen = self._seen_base(t, dir_ino)
                        out = [
                            (*entries[i], i + 1, _plus_stat(t, dir_ino, *entries[i], seen))
                            for i in range(k, end)
                        ]
                else:
                    out = [(*entries[i], i + 1, None) for i in range(k, end)]
                yield from out
                k, batch = end, min(batch * 2, PLUS_BATCH_MAX)

        return gen()

    def _seen_base(self, t: Txn, dir_ino: int) -> tuple[Callable, int, bytes] | None:
        """``(remember, snapshot id, directory path + "/")`` for :func:`_plus_stat` to note each entry it
        gives attributes for in :attr:`Resolver.seen <libraryfs.fs.resolve.Resolver.seen>` (the kernel's
        OPEN of a listed name then needs no lookup: ``rg`` opens every file it listed); None when that
        cannot be exact (no snapshot ids, libfuse hidden names exist, a detached directory)."""
        snap = t.snapshot()
        if snap is None or self.handles.hidden:
            return None
        path = t.path_of(dir_ino)
        if path is None:
            return None
        return self.resolver.remember, snap, path.rstrip(b"/") + b"/"

    def dir_path(self, fh: int) -> bytes | None:
        """Current absolute path of the stored directory open as ``fh``; None for a generated directory, a
        detached one or an unknown handle."""
        d = self.handles.dir(fh)
        if d is None or not d.ino:
            return None
        with self.store.read() as t:
            return t.path_of(d.ino)

    def releasedir(self, fh: int) -> None:
        """Forget a directory handle (closedir(3))."""
        self.handles.close_dir(fh)


PLUS_BATCH = 32  #: entries whose attributes one readdirplus read transaction fetches first
PLUS_BATCH_MAX = 512  #: largest batch


def _plus_stat(
    t: Txn, dir_ino: int, name: bytes, _ftype: int, ino: int, seen: tuple[Callable, int, bytes] | None = None
) -> dict | None:
    """The ``stat`` of entry ``name`` → ``ino`` of stored directory ``dir_ino`` for READDIRPLUS, or None when
    a lookup must decide (module doc): a dot entry, a dirent gone or moved since the snapshot, a hard-linked
    file. ``seen``: ``(remember, snapshot id, directory path + "/")`` of :meth:`DirListing._seen_base`, to
    note an entry given attributes as resolved in this snapshot."""
    if name == b"." or name == b".." or t.lookup(dir_ino, name) != ino:
        return None
    node = t.inode(ino)
    if node is None or (node.nlink > 1 and not node.is_dir):
        return None
    if seen is not None:
        remember, snap, base = seen
        remember(snap, base + name, Resolved(Kind.REAL, ino, node))
    return inode_stat(node)


def _dots(ino: int, parent_ino: int) -> list[tuple[bytes, int, int]]:
    """The ``.`` and ``..`` entries of directory ``ino`` whose parent is ``parent_ino`` (the root is its own
    parent). Their inode numbers must be non-zero: glibc's readdir(3) skips a dirent with ``d_ino`` 0, so
    ``ls -a`` would show neither."""
    return [(b".", S.S_IFDIR, ino), (b"..", S.S_IFDIR, parent_ino)]


def _stored_entries(t: Txn, dir_ino: int) -> Iterator[tuple[bytes, int, int]]:
    """The stored dirents of ``dir_ino`` as ``(name, type bits, child ino)``."""
    for name, child, ftype in t.iter_dir_typed(dir_ino):
        if ftype is None:  # a dirent written before file types were recorded
            node = t.inode(child)
            if node is None:
                continue
            ftype = node.mode & S.S_IFMT
        yield name, ftype, child
