"""An os-like view of a library's tree, for builders that write files into it (code index, cards, episodes).

Paths are library-relative POSIX strings (``"code/repo/pkg/mod.py"``); names may carry surrogate escapes for
non-UTF-8 bytes (``os.fsdecode``). Two implementations share one small interface:

* :class:`DirTree` — a plain directory: the mountpoint of a mounted library (every write goes through the
  FUSE mount, so the kernel's caches and the journal see it), or any directory in unit tests.
* :class:`StoreTree` — the LMDB store directly, for a library that is not mounted: the same POSIX
  operations applied in-process (one write transaction per operation, journaled like the mount's, so the
  indexer sees them).

:func:`open_tree` picks the right one for a library directory (the mount when it is mounted, so the kernel's
caches stay coherent).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from typing import Protocol

from libraryfs.errors import Exists, LibraryError, NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.generated import INDEX_FILE, is_reserved
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.layout import mount_info


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
        """Create or replace a file (parents created), atomically: written to a short temporary name
        (``.lfs-<pid>-<12 hex>.tmp``, within NAME_MAX = 255 bytes whatever the file's name) in the same
        directory, then ``rename(2)``d over it; the temporary file is removed on failure. See
        :class:`~libraryfs.fs.tree.Tree`."""
        p = self._p(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        # a short fixed-length temporary name: ".<name>.<pid>.tmp" of a name near NAME_MAX (255 bytes) was
        # itself over it (ENAMETOOLONG), and an ingest stopped part-way
        tmp = os.path.join(os.path.dirname(p), f".lfs-{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

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


def open_tree(libdir: str) -> Tree:
    """A Tree over the library: through its mount if mounted, else directly over the store."""
    info = mount_info(libdir)
    if info:
        return DirTree(info["mountpoint"])
    return StoreTree(Store(libdir))


def _b(rel: str) -> bytes:
    rel = rel.strip("/")
    parts = rel.split("/") if rel else []
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a clean library-relative path: {rel!r}")
    return b"/" + os.fsencode(rel) if rel else b"/"


class StoreTree:
    """:class:`~libraryfs.fs.tree.Tree` applied directly to a store (the library must not be mounted)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.view = LibraryView(store)
        self.uid, self.gid = os.getuid(), os.getgid()

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def _errno(self, e: LibraryError, rel: str) -> OSError:
        return OSError(e.errno, str(e), rel)

    def read_bytes(self, rel: str) -> bytes:
        """Whole content of a regular file (bytes); see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            fh, _ = self.view.open(_b(rel), os.O_RDONLY)
            try:
                out = bytearray()
                while True:
                    chunk = self.view.read(fh, 1 << 20, len(out))
                    if not chunk:
                        return bytes(out)
                    out += chunk
            finally:
                self.view.release(fh)
        except LibraryError as e:
            raise self._errno(e, rel) from None

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Create or replace a file (parents created); see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            self.makedirs(os.path.dirname(rel.strip("/")))
            fh = self.view.create(_b(rel), 0o644, os.O_WRONLY | os.O_TRUNC, self.uid, self.gid)
            try:
                for off in range(0, len(data), 1 << 20):
                    self.view.write(fh, data[off : off + (1 << 20)], off)
            finally:
                self.view.release(fh)
        except LibraryError as e:
            raise self._errno(e, rel) from None

    def append_bytes(self, rel: str, data: bytes) -> None:
        """Append to a file, creating it and its parents; see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            self.makedirs(os.path.dirname(rel.strip("/")))
            fh = self.view.create(_b(rel), 0o644, os.O_WRONLY | os.O_APPEND, self.uid, self.gid)
            try:
                self.view.write(fh, data, 0)
            finally:
                self.view.release(fh)
        except LibraryError as e:
            raise self._errno(e, rel) from None

    def makedirs(self, rel: str) -> None:
        """Create a directory and its parents (existing is fine); see :class:`~libraryfs.fs.tree.Tree`."""
        rel = rel.strip("/")
        if not rel:
            return
        path = b""
        for comp in os.fsencode(rel).split(b"/"):
            path += b"/" + comp
            try:
                self.view.mkdir(path, 0o755, self.uid, self.gid)
            except Exists:
                if not self.isdir(os.fsdecode(path)):
                    raise OSError(20, "not a directory", os.fsdecode(path)) from None
            except LibraryError as e:
                raise self._errno(e, rel) from None

    def remove(self, rel: str) -> None:
        """Remove a file or a directory subtree (missing is fine); see :class:`~libraryfs.fs.tree.Tree`."""
        p = _b(rel)
        try:
            st = self.view.getattr(p)
        except NotFound:
            return
        except LibraryError as e:
            raise self._errno(e, rel) from None
        try:
            if st["st_mode"] & S.S_IFMT == S.S_IFDIR:
                for name in self._names(p):
                    self.remove(os.fsdecode((p.rstrip(b"/") + b"/" + name).lstrip(b"/")))
                self.view.rmdir(p)
            else:
                self.view.unlink(p)
        except LibraryError as e:
            raise self._errno(e, rel) from None

    def _names(self, p: bytes) -> list[bytes]:
        fh = self.view.opendir(p)
        try:
            return sorted(
                n
                for n, mode, _ino, _o in self.view.readdir(fh, 0)
                if n not in (b".", b"..") and not _virtual(n, p)
            )
        finally:
            self.view.releasedir(fh)

    def rename(self, src: str, dst: str) -> None:
        """Rename, replacing an existing file atomically; see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            self.makedirs(os.path.dirname(dst.strip("/")))
            self.view.rename(_b(src), _b(dst), 0)
        except LibraryError as e:
            raise self._errno(e, src) from None

    def listdir(self, rel: str) -> list[str]:
        """Sorted names of a directory, generated files excluded; see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            return [os.fsdecode(n) for n in self._names(_b(rel))]
        except LibraryError as e:
            raise self._errno(e, rel) from None

    def exists(self, rel: str) -> bool:
        """Whether the path exists (a dangling symlink counts); see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            self.view.getattr(_b(rel))
            return True
        except LibraryError:
            return False

    def isdir(self, rel: str) -> bool:
        """Whether the path is a directory; see :class:`~libraryfs.fs.tree.Tree`."""
        try:
            return self.view.getattr(_b(rel))["st_mode"] & S.S_IFMT == S.S_IFDIR
        except LibraryError:
            return False


def _virtual(name: bytes, parent: bytes) -> bool:
    """Whether ``name`` listed in the directory at path ``parent`` is generated (INDEX.md, .index, …)."""
    return is_reserved(name, S.ROOT_INO if parent == b"/" else 0)
