"""Two ways to run the same POSIX behaviour (tests/posix_behaviour/) (rclone's vfstest is the model): a driver is the file API a case
uses, with errors as ``OSError`` carrying the errno the kernel would return.

* :class:`ViewDriver` — in process, straight on :class:`~libraryfs.fs.view.LibraryView` over a real LMDB
  store (no kernel: the view's own semantics, e.g. O_APPEND at the store's end, O_TRUNC in open);
* :class:`MountDriver` — through the kernel on a real FUSE mount whose server is a subprocess (a hung
  operation fails by timeout and teardown kills the server; it cannot deadlock the test runner).

Paths are ``bytes`` relative to the driver's case directory (``b"a/b.md"``). Listings leave out the names
the library generates (``INDEX.md``, ``.index``). A handle is whatever :meth:`open` returns.
"""

from __future__ import annotations

import itertools
import os
import stat as _stat
from typing import Any

from libraryfs.errors import LibraryError
from libraryfs.fs.attrs import UTIME_NOW, UTIME_OMIT
from libraryfs.fs.view import LibraryView

GENERATED = {b"INDEX.md", b".index"}  #: names every directory of a library shows (left out of listings)
OMIT, NOW = "omit", "now"  #: utime sentinels a case may pass for atime/mtime (UTIME_OMIT, UTIME_NOW)


class ViewDriver:
    """In-process driver over a :class:`LibraryView` (module doc). ``root``: the case directory (bytes)."""

    name = "view"

    def __init__(self, view: LibraryView, root: bytes) -> None:
        self.v = view
        self.root = root.rstrip(b"/")
        self.uid, self.gid = os.getuid(), os.getgid()
        self.v.mkdir(self.root, 0o755, self.uid, self.gid)

    def _p(self, rel: bytes) -> bytes:
        return self.root + b"/" + rel if rel else self.root

    def _call(self, fn, *args) -> Any:
        try:
            return fn(*args)
        except LibraryError as e:
            raise OSError(e.errno, os.strerror(e.errno)) from e

    # files through handles
    def open(self, rel: bytes, flags: int, mode: int = 0o644) -> Any:
        """``open(2)``: a handle (``O_CREAT`` goes to ``create``, as the kernel's atomic_open does)."""
        if flags & os.O_CREAT:
            return self._call(self.v.create, self._p(rel), mode, flags, self.uid, self.gid)
        return self._call(self.v.open, self._p(rel), flags)[0]

    def pwrite(self, fh: Any, data: bytes, offset: int) -> int:
        return self._call(self.v.write, fh, data, offset)

    def pread(self, fh: Any, size: int, offset: int) -> bytes:
        return self._call(self.v.read, fh, size, offset)

    def ftruncate(self, fh: Any, length: int) -> None:
        self._call(self.v.truncate, None, length, fh)

    def fstat(self, fh: Any) -> dict:
        return _ns(self._call(self.v.getattr, None, fh))

    def fchmod(self, fh: Any, mode: int) -> None:
        self._call(self.v.chmod, None, mode, fh)

    def close(self, fh: Any) -> None:
        self._call(self.v.release, fh)

    # paths
    def stat(self, rel: bytes) -> dict:
        """``lstat(2)`` as a dict of ``st_*`` fields (times as ``st_atime_ns``/``st_mtime_ns``)."""
        return _ns(self._call(self.v.getattr, self._p(rel)))

    def truncate(self, rel: bytes, length: int) -> None:
        self._call(self.v.truncate, self._p(rel), length)

    def rename(self, src: bytes, dst: bytes) -> None:
        self._call(self.v.rename, self._p(src), self._p(dst), 0)

    def unlink(self, rel: bytes) -> None:
        self._call(self.v.unlink, self._p(rel))

    def mkdir(self, rel: bytes, mode: int = 0o755) -> None:
        self._call(self.v.mkdir, self._p(rel), mode, self.uid, self.gid)

    def rmdir(self, rel: bytes) -> None:
        self._call(self.v.rmdir, self._p(rel))

    def listdir(self, rel: bytes = b"") -> list[bytes]:
        """Names in readdir order (``.``/``..`` and generated names left out), read as the kernel does:
        100 entries at a time, each batch resumed from the offset of the last entry it got."""
        fh = self._call(self.v.opendir, self._p(rel))
        out: list[bytes] = []
        offset = 0
        try:
            while True:
                batch = list(itertools.islice(self._call(self.v.readdir, fh, offset), 100))
                out += [n for n, _m, _i, _o in batch if n not in (b".", b"..") and n not in GENERATED]
                if len(batch) < 100:
                    return out
                offset = batch[-1][3]
        finally:
            self.v.releasedir(fh)

    def chmod(self, rel: bytes, mode: int) -> None:
        self._call(self.v.chmod, self._p(rel), mode)

    def utime(self, rel: bytes, atime_ns: Any, mtime_ns: Any) -> None:
        """``utimensat(2)``: each time in ns, :data:`NOW` or :data:`OMIT`."""
        conv = {NOW: UTIME_NOW, OMIT: UTIME_OMIT}
        self._call(self.v.utimens, self._p(rel), conv.get(atime_ns, atime_ns), conv.get(mtime_ns, mtime_ns))

    def symlink(self, target: bytes, rel: bytes) -> None:
        self._call(self.v.symlink, self._p(rel), target, self.uid, self.gid)

    def readlink(self, rel: bytes) -> bytes:
        return self._call(self.v.readlink, self._p(rel))

    def link(self, src: bytes, dst: bytes) -> None:
        self._call(self.v.link, self._p(src), self._p(dst))

    def setxattr(self, rel: bytes, name: bytes, value: bytes) -> None:
        self._call(self.v.setxattr, self._p(rel), name, value, 0)

    def getxattr(self, rel: bytes, name: bytes) -> bytes:
        return self._call(self.v.getxattr, self._p(rel), name)

    def statvfs(self) -> dict:
        return self._call(self.v.statfs)


class MountDriver:
    """Driver through the kernel on a mounted library (module doc). ``root``: the case directory (bytes)."""

    name = "mount"

    def __init__(self, root: bytes) -> None:
        self.root = root.rstrip(b"/")
        os.mkdir(self.root)

    def _p(self, rel: bytes) -> bytes:
        return self.root + b"/" + rel if rel else self.root

    def open(self, rel: bytes, flags: int, mode: int = 0o644) -> int:
        return os.open(self._p(rel), flags, mode)

    def pwrite(self, fh: int, data: bytes, offset: int) -> int:
        """``pwrite(2)``; on Linux a handle with O_APPEND writes at the end whatever the offset."""
        return os.pwrite(fh, data, offset)

    def pread(self, fh: int, size: int, offset: int) -> bytes:
        return os.pread(fh, size, offset)

    def ftruncate(self, fh: int, length: int) -> None:
        os.ftruncate(fh, length)

    def fstat(self, fh: int) -> dict:
        return _as_dict(os.fstat(fh))

    def fchmod(self, fh: int, mode: int) -> None:
        os.fchmod(fh, mode)

    def close(self, fh: int) -> None:
        os.close(fh)

    def stat(self, rel: bytes) -> dict:
        return _as_dict(os.lstat(self._p(rel)))

    def truncate(self, rel: bytes, length: int) -> None:
        os.truncate(self._p(rel), length)

    def rename(self, src: bytes, dst: bytes) -> None:
        os.rename(self._p(src), self._p(dst))

    def unlink(self, rel: bytes) -> None:
        os.unlink(self._p(rel))

    def mkdir(self, rel: bytes, mode: int = 0o755) -> None:
        os.mkdir(self._p(rel), mode)

    def rmdir(self, rel: bytes) -> None:
        os.rmdir(self._p(rel))

    def listdir(self, rel: bytes = b"") -> list[bytes]:
        return [n for n in os.listdir(self._p(rel)) if n not in GENERATED]

    def chmod(self, rel: bytes, mode: int) -> None:
        os.chmod(self._p(rel), mode)

    def utime(self, rel: bytes, atime_ns: Any, mtime_ns: Any) -> None:
        """``utimensat(2)`` with UTIME_NOW/UTIME_OMIT passed through as the kernel sees them."""
        _utimensat(self._p(rel), atime_ns, mtime_ns)

    def symlink(self, target: bytes, rel: bytes) -> None:
        os.symlink(target, self._p(rel))

    def readlink(self, rel: bytes) -> bytes:
        return os.readlink(self._p(rel))

    def link(self, src: bytes, dst: bytes) -> None:
        os.link(self._p(src), self._p(dst))

    def setxattr(self, rel: bytes, name: bytes, value: bytes) -> None:
        os.setxattr(self._p(rel), name, value)

    def getxattr(self, rel: bytes, name: bytes) -> bytes:
        return os.getxattr(self._p(rel), name)

    def statvfs(self) -> dict:
        s = os.statvfs(self.root)
        return {
            f: getattr(s, f) for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_namemax")
        }


def _ns(st: dict) -> dict:
    """The view's stat dict (times in ns under mfusepy's names) with ``st_atime_ns``/``st_mtime_ns``."""
    return {**st, "st_atime_ns": st["st_atime"], "st_mtime_ns": st["st_mtime"]}


def _as_dict(st: os.stat_result) -> dict:
    return {
        "st_mode": st.st_mode,
        "st_size": st.st_size,
        "st_nlink": st.st_nlink,
        "st_atime_ns": st.st_atime_ns,
        "st_mtime_ns": st.st_mtime_ns,
        "st_uid": st.st_uid,
        "st_gid": st.st_gid,
    }


def _utimensat(path: bytes, atime: Any, mtime: Any) -> None:
    """utimensat(AT_FDCWD, path, times, 0) through libc, so UTIME_NOW/UTIME_OMIT reach the kernel as such."""
    import ctypes
    import ctypes.util

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    utime_now, utime_omit = (1 << 30) - 1, (1 << 30) - 2  # <sys/stat.h>

    def ts(v: Any) -> Timespec:
        if v == NOW:
            return Timespec(0, utime_now)
        if v == OMIT:
            return Timespec(0, utime_omit)
        return Timespec(v // 10**9, v % 10**9)

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    times = (Timespec * 2)(ts(atime), ts(mtime))
    if libc.utimensat(-100, path, times, 0) != 0:  # AT_FDCWD
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def is_dir(st: dict) -> bool:
    """Whether a stat dict is a directory."""
    return _stat.S_ISDIR(st["st_mode"])
