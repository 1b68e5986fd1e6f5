"""The names of hard-linked files that the kernel has looked up, so their cached attributes can be dropped.

libfuse's high-level API gives every *name* its own kernel inode (node ids are per path), so after ``link``,
``unlink``, ``chmod``… through one name, the kernel keeps the other names' cached attributes (``nlink``,
``mode``, ``ctime``, ``size``) until the attribute timeout. A reverse index from inode to names is not
stored; it is not needed either: the kernel can only cache attributes of a name it looked up through this
mount, and every lookup reaches :meth:`AttrOps.getattr <libraryfs.fs.attrs.AttrOps.getattr>`, which notes
here each name of an inode with ``nlink > 1``. After a change through one name, the adapter invalidates the
others (:meth:`FuseOps.invalidate <libraryfs.fs.fuse_adapter.FuseOps.invalidate>`).

In memory only, bounded (:data:`MAX_NAMES`; past it the registry starts again: a forgotten name is stale
for at most the attribute timeout, as before). Renames move a noted name; names below a renamed directory
are not followed (stale ≤ the attribute timeout). Not thread-safe by itself: the FUSE handlers run one at a
time (:mod:`libraryfs.fs.serverlock`).
"""

from __future__ import annotations

MAX_NAMES = 65_536  #: noted names kept at most


class LinkNames:
    """Noted names (absolute paths, bytes) of multiply linked inodes: ``path → ino`` and ``ino → paths``."""

    def __init__(self) -> None:
        self._ino_of: dict[bytes, int] = {}
        self._paths: dict[int, set[bytes]] = {}

    def __len__(self) -> int:
        """Number of paths recorded."""
        return len(self._ino_of)

    def note(self, path: bytes, ino: int) -> None:
        """Record that the kernel knows ``path`` as a name of inode ``ino`` (which has ``nlink > 1``)."""
        if self._ino_of.get(path) == ino:
            return
        self.forget(path)
        if len(self._ino_of) >= MAX_NAMES:
            self._ino_of.clear()
            self._paths.clear()
        self._ino_of[path] = ino
        self._paths.setdefault(ino, set()).add(path)

    def forget(self, path: bytes) -> None:
        """Drop ``path`` (unlinked, or replaced by another file)."""
        ino = self._ino_of.pop(path, None)
        if ino is not None:
            paths = self._paths.get(ino)
            if paths is not None:
                paths.discard(path)
                if not paths:
                    del self._paths[ino]

    def others(self, path: bytes) -> tuple[int, list[bytes]]:
        """``(ino, the other noted names of the inode path names)``; ``(0, [])`` when ``path`` is not noted."""
        ino = self._ino_of.get(path)
        if ino is None:
            return 0, []
        return ino, sorted(p for p in self._paths.get(ino, ()) if p != path)

    def rename(self, old: bytes, new: bytes) -> None:
        """``old`` was renamed to ``new``: a noted ``old`` becomes ``new`` (a noted ``new`` was replaced)."""
        self.forget(new)
        ino = self._ino_of.get(old)
        if ino is not None:
            self.forget(old)
            self.note(new, ino)
