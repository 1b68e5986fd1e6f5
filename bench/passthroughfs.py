"""The bare binding as a real filesystem: an mfusepy passthrough that mirrors a directory, mounted like libraryfs.

Used by ``bench/workloads.py`` as the "bare binding" column. :mod:`memfs` (dict in memory) is the floor for
``bench/fs_bench.py``'s micro-operations, but real workloads (``tar``, ``git clone``, SQLite) need renames,
links, symlinks, xattrs, ``fsync`` that reaches a disk, and ``chown``/``utimens`` with the right sentinels.
This filesystem forwards every request to the same call on a backing directory — exactly what bindfs (C)
does — so beside bindfs it measures what the Python binding costs, and beside libraryfs what libraryfs's own
code (view + LMDB) costs above the binding. Its backing directory sits on the same disk as bindfs's and as
the library's LMDB file, so ``fsync`` costs all three the same disk flush.

Mounted as :mod:`libraryfs.fuse_adapter` mounts a library (and as :mod:`memfs` is):

* mfusepy on libfuse3 (``FUSE_LIBRARY_NAME=fuse3``), high-level API, ``raw_fi=True``, ``use_ns``;
* single-threaded (``nothreads``), ``default_permissions`` (the kernel checks modes);
* ``init_with_config``: entry/attr/negative timeouts (default 1 s each), ``use_ino``, ``hard_remove`` off,
  ``nullpath_ok``, ``auto_cache``;
* no ``flush`` (one round trip less per close), no ``lock`` (the kernel keeps POSIX locks locally), xattrs
  forwarded (the kernel asks ``security.capability`` on every ``write(2)``, as it asks libraryfs).

Handles are the backing file's descriptors. Errors are the backing call's ``OSError.errno``.

Run: ``python bench/passthroughfs.py SOURCE MOUNTPOINT [--timeouts 1,1,1]`` — serves in the foreground until
unmounted (``fusermount3 -u MOUNTPOINT``) or SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
import time

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would load libfuse2 if both exist

import mfusepy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memfs import MemFS, add_timeouts_option, parse_timeouts  # noqa: E402

_UTIME_NOW_NS = (1 << 30) - 1
_UTIME_OMIT_NS = (1 << 30) - 2
_STAT_KEYS = (
    "st_ino",
    "st_mode",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_blocks",
    "st_blksize",
    "st_rdev",
    "st_atime_ns",
    "st_mtime_ns",
    "st_ctime_ns",
)


def _errno(fn):
    """OSError from the backing call → FuseOSError with its errno (mfusepy returns it to the kernel)."""

    @functools.wraps(fn)
    def wrapper(*a):
        try:
            return fn(*a)
        except OSError as e:
            raise mfusepy.FuseOSError(e.errno or errno.EIO) from None

    return wrapper


def _stat_dict(st: os.stat_result) -> dict:
    d = {k: getattr(st, k) for k in _STAT_KEYS}
    for k in ("atime", "mtime", "ctime"):  # use_ns: mfusepy reads st_Xtime as ns
        d["st_" + k] = d.pop(f"st_{k}_ns")
    return d


class Passthrough(mfusepy.Operations):
    """Every operation is the same call on ``source + path`` (or on the handle's descriptor)."""

    use_ns = True
    flag_nullpath_ok = True
    flag_nopath = True

    def __init__(self, source: str, timeouts_s: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> None:
        self.source = os.path.realpath(source)
        self.timeouts_s = timeouts_s

    def _p(self, path: str) -> str:
        return self.source + path

    init_with_config = MemFS.init_with_config  # the values libraryfs sets (timeouts, use_ino, auto_cache, …)

    # -- attributes ------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def getattr(self, path, fh=None):
        if fh is not None:
            return _stat_dict(os.fstat(fh.fh if not isinstance(fh, int) else fh))
        return _stat_dict(os.lstat(self._p(path)))

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def chmod(self, path, mode):
        os.chmod(self._p(path), mode & 0o7777)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def chown(self, path, uid, gid):
        os.chown(self._p(path), uid, gid, follow_symlinks=False)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def utimens(self, path, times=None):
        # times: (atime, mtime) in ns, or None for "now"; PassthroughFUSE decodes UTIME_NOW/OMIT
        p = self._p(path)
        if times is None:
            os.utime(p, follow_symlinks=False)
            return 0
        st = os.lstat(p) if None in times else None
        now = time.time_ns()
        at, mt = (
            (now if t == "now" else (getattr(st, k) if t is None else t))
            for t, k in zip(times, ("st_atime_ns", "st_mtime_ns"), strict=False)
        )
        os.utime(p, ns=(at, mt), follow_symlinks=False)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def statfs(self, path):
        sv = os.statvfs(self.source)
        return {
            k: getattr(sv, k)
            for k in (
                "f_bsize",
                "f_frsize",
                "f_blocks",
                "f_bfree",
                "f_bavail",
                "f_files",
                "f_ffree",
                "f_favail",
                "f_namemax",
            )
        }

    # -- xattrs ------------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def getxattr(self, path, name, position=0):
        return os.getxattr(self._p(path), name, follow_symlinks=False)

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def listxattr(self, path):
        return os.listxattr(self._p(path), follow_symlinks=False)

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def setxattr(self, path, name, value, options, position=0):
        os.setxattr(self._p(path), name, value, options, follow_symlinks=False)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def removexattr(self, path, name):
        os.removexattr(self._p(path), name, follow_symlinks=False)
        return 0

    # -- directories ---------------------------------------------------------------------------------------
    # nullpath_ok: readdir, releasedir and fsyncdir get no path, only the handle opendir returned
    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def opendir(self, path):
        return os.open(self._p(path), os.O_RDONLY | os.O_DIRECTORY)

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def readdir(self, path, fh):
        # "." with its inode number (an entry with d_ino 0 is dropped by glibc's readdir), ".." unknown
        out: list = [(".", {"st_ino": os.fstat(fh).st_ino, "st_mode": 0o040000}, 0), ("..", None, 0)]
        with os.scandir(fh) as it:  # (a dup, rewound) d_type and d_ino from getdents, no stat per entry
            for e in it:
                out.append((e.name, {"st_ino": e.inode(), "st_mode": _dtype_mode(e)}, 0))
        return out

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def releasedir(self, path, fh):
        os.close(fh)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def mkdir(self, path, mode):
        os.mkdir(self._p(path), mode)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def rmdir(self, path):
        os.rmdir(self._p(path))
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def fsyncdir(self, path, datasync, fh):
        os.fsync(fh)
        return 0

    # -- names ---------------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def mknod(self, path, mode, dev):
        os.mknod(self._p(path), mode, dev)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def unlink(self, path):
        os.unlink(self._p(path))
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def rename(self, old, new):
        os.rename(self._p(old), self._p(new))
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def link(self, target, source):  # mfusepy: (new name, existing path)
        os.link(self._p(source), self._p(target), follow_symlinks=False)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def symlink(self, target, source):  # mfusepy: (path of the new link, link content)
        os.symlink(source, self._p(target))
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def readlink(self, path):
        return os.readlink(self._p(path))

    # -- files -----------------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def create(self, path, mode, fi=None):
        fi.fh = os.open(self._p(path), fi.flags | os.O_CREAT, mode)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def open(self, path, fi):
        fi.fh = os.open(self._p(path), fi.flags)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def read(self, path, size, offset, fi):
        return os.pread(fi.fh, size, offset)

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def write(self, path, data, offset, fi):
        return os.pwrite(fi.fh, data, offset)

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._p(path), length)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def fsync(self, path, datasync, fi):
        (os.fdatasync if datasync else os.fsync)(fi.fh)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    @_errno
    def release(self, path, fi):
        os.close(fi.fh)
        return 0


def _dtype_mode(e: os.DirEntry) -> int:
    if e.is_symlink():
        return 0o120000
    if e.is_dir(follow_symlinks=False):
        return 0o040000
    return 0o100000 if e.is_file(follow_symlinks=False) else 0


class PassthroughFUSE(mfusepy.FUSE):
    """mfusepy's FUSE with the libfuse3 wrappers a passthrough needs fixed: ``utimens`` decodes
    UTIME_NOW/UTIME_OMIT (mfusepy turns them into bogus times) and ``truncate`` keeps the descriptor."""

    def utimens_fuse_3(self, path, buf, fip) -> int:
        """libfuse3 utimens: ``(atime, mtime)`` in ns, ``"now"`` for UTIME_NOW, None for UTIME_OMIT."""
        times = None
        if buf:

            def conv(ts):
                if ts.tv_nsec == _UTIME_NOW_NS:
                    return "now"
                if ts.tv_nsec == _UTIME_OMIT_NS:
                    return None
                return ts.tv_sec * 10**9 + ts.tv_nsec

            times = (conv(buf.contents.actime), conv(buf.contents.modtime))
        return self.operations.utimens(
            None if path is None else path.decode(self.encoding, self.errors), times
        )

    def truncate_fuse_3(self, path, length, fip) -> int:
        """libfuse3 truncate with the handle's descriptor (``ftruncate`` of a file unlinked while open)."""
        fh = fip.contents.fh if fip else None
        return self.operations.truncate(
            None if path is None else path.decode(self.encoding, self.errors), length, fh
        )


def main(argv: list[str] | None = None) -> int:
    """Mount a :class:`Passthrough` of SOURCE at MOUNTPOINT in the foreground; returns when unmounted."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source")
    ap.add_argument("mountpoint")
    add_timeouts_option(ap)
    a = ap.parse_args(argv)
    timeouts = parse_timeouts(ap, a.timeouts)
    PassthroughFUSE(
        Passthrough(a.source, timeouts),
        a.mountpoint,
        raw_fi=True,
        foreground=True,  # type: ignore[arg-type]
        nothreads=True,
        fsname="passthrough",
        subtype="passthrough",
        default_permissions=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
