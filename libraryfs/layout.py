"""A library as a whole: where it is mounted, and a :class:`~libraryfs.fs.tree.Tree` to write into it.

:func:`open_tree` returns a :class:`~libraryfs.fs.tree.DirTree` over the mountpoint when the library is mounted
(writes then go through the kernel, so its caches stay coherent), else a :class:`StoreTree` that applies the
same POSIX operations to the store in-process (one write transaction per operation, journaled like the
mount's, so the indexer sees them).
"""

from __future__ import annotations

import fcntl
import os
import re

from libraryfs.errors import Exists, IsADir, LibraryError, NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.generated import is_reserved
from libraryfs.fs.store import Store
from libraryfs.fs.tree import DirTree, Tree
from libraryfs.fs.view import LibraryView


def mount_info(libdir: str) -> dict | None:
    """``{"pid", "mountpoint", ...}`` of the live mount server of ``libdir``, or None if not mounted.

    Live means: the server holds ``mount.lock``, ``/proc/mounts`` lists a libraryfs mount at the recorded
    mountpoint, and it answers ``statvfs``.
    """
    libdir = os.path.abspath(libdir)
    lock = os.path.join(libdir, "mount.lock")
    if not os.path.exists(lock):
        return None
    fd = os.open(lock, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None  # nobody holds it
        except BlockingIOError:
            pass
    finally:
        os.close(fd)
    try:
        st = Store(libdir, readonly=True)
    except LibraryError:
        return None
    try:
        with st.read() as t:
            info = S.loads(t.cfg(S.CFG_MOUNT_STATUS), {}) or {}
    finally:
        st.close()
    mp = info.get("mountpoint")  # type: ignore[union-attr]
    if not mp:
        return None
    try:
        os.statvfs(mp)
    except OSError:
        return None
    if not _in_proc_mounts(mp):
        return None  # e.g. lazily unmounted while files stay open: the server runs, nothing is mounted
    return info  # type: ignore[return-value]


def proc_mounts() -> list[tuple[str, str, str]]:
    """``(device, mountpoint, fstype)`` of every line of ``/proc/mounts``, octal escapes (``\\040``)
    decoded byte-exactly. The device of a libraryfs mount is ``libraryfs:<library directory>``."""

    def unescape(field: bytes) -> str:
        return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field))

    out = []
    try:
        with open("/proc/mounts", "rb") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    out.append((unescape(parts[0]), unescape(parts[1]), unescape(parts[2])))
    except OSError:
        pass
    return out


def proc_mount(mountpoint: str) -> tuple[str, str] | None:
    """``(device, fstype)`` of what is mounted at ``mountpoint`` (the last mount wins), or None."""
    mp = os.path.realpath(mountpoint)
    found = None
    for dev, where, fstype in proc_mounts():
        if where == mp:
            found = (dev, fstype)
    return found


def _in_proc_mounts(mountpoint: str) -> bool:
    """Whether ``/proc/mounts`` lists a libraryfs FUSE mount at ``mountpoint``."""
    m = proc_mount(mountpoint)
    return m is not None and m[0].startswith("libraryfs:")


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


__all__ = ["open_tree", "mount_info", "StoreTree", "IsADir"]
