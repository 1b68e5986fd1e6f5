"""An os-like view of a library's tree, for builders that write files into it (code index, cards, episodes).

Paths are library-relative POSIX strings (``"code/repo/pkg/mod.py"``); names may carry surrogate escapes for
non-UTF-8 bytes (``os.fsdecode``). Two implementations share one small interface:

* :class:`DirTree` — a plain directory: the mountpoint of a mounted library (every write goes through the
  FUSE mount, so the kernel's caches and the journal see it), or any directory in unit tests.
* :class:`libraryfs.layout.StoreTree` — the LMDB store directly, for a library that is not mounted.

:func:`libraryfs.layout.open_tree` picks the right one for a library directory.
"""

from __future__ import annotations

import os
import shutil
from typing import Protocol

from libraryfs.fs.generated import INDEX_FILE


class Tree(Protocol):
    """The file operations a builder needs. Errors are the usual ``OSError`` subclasses
    (``FileNotFoundError``, ``FileExistsError``, ``IsADirectoryError``, ``NotADirectoryError``)."""

    def read_bytes(self, rel: str) -> bytes:
        """Whole content of a regular file (bytes)."""
        ...

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Create or replace a regular file atomically (parents created as needed)."""
        ...

    def append_bytes(self, rel: str, data: bytes) -> None:
        """Append to a regular file, creating it (and its parents) if missing."""
        ...

    def makedirs(self, rel: str) -> None:
        """Create a directory and its parents; an existing directory is fine."""
        ...

    def remove(self, rel: str) -> None:
        """Remove a file or a whole directory subtree; a missing path is fine."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Rename (atomic replace of an existing file at ``dst``)."""
        ...

    def listdir(self, rel: str) -> list[str]:
        """Names in a directory (generated INDEX.md files excluded), sorted."""
        ...

    def exists(self, rel: str) -> bool:
        """Whether the path exists."""
        ...

    def isdir(self, rel: str) -> bool:
        """Whether the path is a directory."""
        ...


class DirTree:
    """:class:`Tree` over a real directory (a mountpoint, or a temporary directory in tests)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)

    def _p(self, rel: str) -> str:
        rel = rel.strip("/")
        if rel in ("", "."):
            return self.root
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"not a clean library-relative path: {rel!r}")
        return os.path.join(self.root, *parts)

    def read_bytes(self, rel: str) -> bytes:
        """Whole content of a regular file (bytes); see :class:`~libraryfs.fs.tree.Tree`."""
        with open(self._p(rel), "rb") as f:
            return f.read()

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Create or replace a file (parents created); see :class:`~libraryfs.fs.tree.Tree`."""
        p = self._p(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, p)

    def append_bytes(self, rel: str, data: bytes) -> None:
        """Append to a file, creating it and its parents; see :class:`~libraryfs.fs.tree.Tree`."""
        p = self._p(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "ab") as f:
            f.write(data)

    def makedirs(self, rel: str) -> None:
        """Create a directory and its parents (existing is fine); see :class:`~libraryfs.fs.tree.Tree`."""
        os.makedirs(self._p(rel), exist_ok=True)

    def remove(self, rel: str) -> None:
        """Remove a file or a directory subtree (missing is fine); see :class:`~libraryfs.fs.tree.Tree`."""
        p = self._p(rel)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)

    def rename(self, src: str, dst: str) -> None:
        """Rename, replacing an existing file atomically; see :class:`~libraryfs.fs.tree.Tree`."""
        d = self._p(dst)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        os.replace(self._p(src), d)

    def listdir(self, rel: str) -> list[str]:
        """Sorted names of a directory, generated files excluded; see :class:`~libraryfs.fs.tree.Tree`."""
        return sorted(n for n in os.listdir(self._p(rel)) if n != INDEX_FILE)

    def exists(self, rel: str) -> bool:
        """Whether the path exists (a dangling symlink counts); see :class:`~libraryfs.fs.tree.Tree`."""
        return os.path.lexists(self._p(rel))

    def isdir(self, rel: str) -> bool:
        """Whether the path is a directory; see :class:`~libraryfs.fs.tree.Tree`."""
        return os.path.isdir(self._p(rel))
