"""The binding's floor: a minimal dict-backed in-memory filesystem on mfusepy, mounted like libraryfs.

Used by ``bench/fs_bench.py`` as baseline (b): whatever libraryfs costs above this filesystem is libraryfs's
own work (view + LMDB); whatever this filesystem costs above tmpfs is the FUSE round trip plus the Python
binding (ctypes callbacks, stat-dict conversion). To be a fair floor it is mounted exactly like
:mod:`libraryfs.fs.fuse_adapter` mounts a library:

* mfusepy on libfuse3 (``FUSE_LIBRARY_NAME=fuse3``), high-level API, ``raw_fi=True``, ``use_ns``;
* single-threaded (``nothreads``), ``default_permissions``;
* ``init_with_config``: entry/attr/negative timeouts (default 1 s each), ``use_ino``, ``hard_remove`` off,
  ``nullpath_ok``, ``auto_cache`` — the same values libraryfs sets;
* the same callbacks for the benchmarked operations (no ``flush``: one round trip less per close, as in
  libraryfs; ARCHITECTURE §7) — but no xattr callbacks: the kernel gets ENOSYS for its first
  ``getxattr("security.capability")`` and stops asking, whereas a filesystem that implements xattrs (as
  libraryfs does) pays that extra round trip on every ``write(2)`` (see docs/benchmarks.md).

It keeps one flat ``dict`` from path to node (the cheapest possible lookup: one hash probe per request,
independent of N) and answers nothing it does not need for the benchmark (no rename, links, xattrs).

Run: ``python bench/memfs.py MOUNTPOINT [--populate N] [--section-entries 1000] [--entry-bytes 1024]
[--timeouts 1,1,1]`` — serves in the foreground until unmounted (``fusermount3 -u MOUNTPOINT``) or SIGTERM.
``--populate`` builds the benchmark tree (``sNNNN/eNNNNNNN.md``, see :func:`tree_names`) in memory before
mounting, so population costs no FUSE requests.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import time

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")  # mfusepy would load libfuse2 if both exist

import mfusepy  # noqa: E402


def tree_names(n_entries: int, section_entries: int = 1000) -> list[tuple[str, str]]:
    """``(section, entry)`` names of the benchmark tree: ``n_entries`` entries in sections of at most
    ``section_entries``; ``s0000/e0000000.md`` … (shared with ``fs_bench.py`` so every filesystem holds the
    same names)."""
    return [(f"s{i // section_entries:04d}", f"e{i:07d}.md") for i in range(n_entries)]


def entry_bytes(i: int, size_bytes: int = 1024) -> bytes:
    """Deterministic content of entry ``i``: ``size_bytes`` bytes of text (a heading line, then filler)."""
    head = f"# entry {i}\n\nBenchmark entry number {i}; deterministic filler follows.\n".encode()
    body = b"lorem ipsum dolor sit amet " * (size_bytes // 27 + 1)
    return (head + body)[: size_bytes - 1] + b"\n"


class Node:
    """A file or directory: a stat dict plus data (files) or a child-name list (directories)."""

    __slots__ = ("attrs", "data", "children")

    def __init__(self, attrs: dict, data: bytearray | None = None, children: dict | None = None) -> None:
        self.attrs = attrs
        self.data = data
        self.children = children


class MemFS(mfusepy.Operations):
    """Dict-backed operations: ``paths[path] -> Node``; open handles map ``fh -> Node``."""

    use_ns = True
    flag_nullpath_ok = True
    flag_nopath = True

    def __init__(self, timeouts_s: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> None:
        self.timeouts_s = timeouts_s
        self.next_ino = 2
        self.paths: dict[str, Node] = {"/": self._new(stat.S_IFDIR | 0o755, 1, nlink=2, children={})}
        self.handles: dict[int, Node] = {}
        self.next_fh = 1

    def _new(
        self,
        mode: int,
        ino: int | None = None,
        nlink: int = 1,
        data: bytearray | None = None,
        children: dict | None = None,
    ) -> Node:
        if ino is None:
            ino = self.next_ino
            self.next_ino += 1
        now = time.time_ns()
        attrs = {
            "st_ino": ino,
            "st_mode": mode,
            "st_nlink": nlink,
            "st_uid": os.getuid(),
            "st_gid": os.getgid(),
            "st_size": 0,
            "st_atime": now,
            "st_mtime": now,
            "st_ctime": now,
            "st_blocks": 0,
            "st_blksize": 128 * 1024,
        }
        return Node(attrs, data, children)

    def _node(self, path: str) -> Node:
        node = self.paths.get(path)
        if node is None:
            raise mfusepy.FuseOSError(errno.ENOENT)
        return node

    def _add(self, path: str, node: Node) -> None:
        parent, _, name = path.rpartition("/")
        pnode = self._node(parent or "/")
        pnode.children[name] = node  # type: ignore[index]
        self.paths[path] = node
        pnode.attrs["st_mtime"] = pnode.attrs["st_ctime"] = time.time_ns()

    def populate(self, n_entries: int, section_entries: int = 1000, size_bytes: int = 1024) -> None:
        """Build the benchmark tree in memory (before mounting)."""
        for i, (sec, ent) in enumerate(tree_names(n_entries, section_entries)):
            d = "/" + sec
            if d not in self.paths:
                self._add(d, self._new(stat.S_IFDIR | 0o755, nlink=2, children={}))
                self.paths["/"].attrs["st_nlink"] += 1
            data = bytearray(entry_bytes(i, size_bytes))
            node = self._new(stat.S_IFREG | 0o644, data=data)
            node.attrs["st_size"] = len(data)
            node.attrs["st_blocks"] = (len(data) + 511) // 512
            self._add(d + "/" + ent, node)

    # -- lifecycle -------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    def init_with_config(self, conn_info, config_3) -> None:
        if config_3 is not None:  # the values libraryfs.fs.fuse_adapter.FuseOps sets
            config_3.entry_timeout, config_3.attr_timeout, config_3.negative_timeout = self.timeouts_s
            config_3.use_ino = 1
            config_3.hard_remove = 0
            config_3.nullpath_ok = 1
            config_3.auto_cache = 1

    # -- attributes --------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    def getattr(self, path, fh=None):
        if path is None:
            fhn = fh if isinstance(fh, int) or fh is None else fh.fh
            return self.handles[fhn].attrs
        return self._node(path).attrs

    @mfusepy.overrides(mfusepy.Operations)
    def utimens(self, path, times=None, fh=None):
        node = self._node(path)
        now = time.time_ns()
        node.attrs["st_atime"], node.attrs["st_mtime"] = times if times else (now, now)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def chmod(self, path, mode, fh=None):
        node = self._node(path)
        node.attrs["st_mode"] = (node.attrs["st_mode"] & ~0o7777) | (mode & 0o7777)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def statfs(self, path):
        return {
            "f_bsize": 4096,
            "f_frsize": 4096,
            "f_blocks": 1 << 20,
            "f_bfree": 1 << 19,
            "f_bavail": 1 << 19,
            "f_files": 1 << 20,
            "f_ffree": 1 << 19,
            "f_favail": 1 << 19,
            "f_namemax": 255,
        }

    # -- directories ---------------------------------------------------------------------------------------
    @mfusepy.overrides(mfusepy.Operations)
    def opendir(self, path):
        node = self._node(path)
        if node.children is None:
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        return self._handle(node)  # nullpath_ok: readdir may get no path, only this handle

    @mfusepy.overrides(mfusepy.Operations)
    def readdir(self, path, fh):
        node = self.handles[fh]
        out = [(".", {"st_mode": stat.S_IFDIR, "st_ino": node.attrs["st_ino"]}, 0), ("..", None, 0)]
        for name, child in node.children.items():
            out.append((name, {"st_mode": child.attrs["st_mode"], "st_ino": child.attrs["st_ino"]}, 0))
        return out

    @mfusepy.overrides(mfusepy.Operations)
    def releasedir(self, path, fh):
        self.handles.pop(fh, None)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def mkdir(self, path, mode):
        if path in self.paths:
            raise mfusepy.FuseOSError(errno.EEXIST)
        self._add(path, self._new(stat.S_IFDIR | (mode & 0o7777), nlink=2, children={}))
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def rmdir(self, path):
        node = self._node(path)
        if node.children:
            raise mfusepy.FuseOSError(errno.ENOTEMPTY)
        self._remove(path)
        return 0

    # -- files -------------------------------------------------------------------------------------------
    def _handle(self, node: Node) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = node
        return fh

    @mfusepy.overrides(mfusepy.Operations)
    def create(self, path, mode, fi=None):
        node = self.paths.get(path)
        if node is None:
            node = self._new(stat.S_IFREG | (mode & 0o7777), data=bytearray())
            self._add(path, node)
        elif fi.flags & os.O_EXCL:
            raise mfusepy.FuseOSError(errno.EEXIST)
        fi.fh = self._handle(node)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def open(self, path, fi):
        node = self._node(path)
        if fi.flags & os.O_TRUNC and node.data:
            del node.data[:]
            node.attrs["st_size"] = 0
        fi.fh = self._handle(node)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def read(self, path, size, offset, fi):
        return bytes(self.handles[fi.fh].data[offset : offset + size])

    @mfusepy.overrides(mfusepy.Operations)
    def write(self, path, data, offset, fi):
        node = self.handles[fi.fh]
        buf = node.data
        if offset > len(buf):
            buf.extend(bytes(offset - len(buf)))
        buf[offset : offset + len(data)] = data
        a = node.attrs
        a["st_size"] = len(buf)
        a["st_blocks"] = (len(buf) + 511) // 512
        a["st_mtime"] = a["st_ctime"] = time.time_ns()
        return len(data)

    @mfusepy.overrides(mfusepy.Operations)
    def truncate(self, path, length, fh=None):
        node = self._node(path) if path is not None else self.handles[fh if isinstance(fh, int) else fh.fh]
        del node.data[length:]
        node.data.extend(bytes(length - len(node.data)))
        node.attrs["st_size"] = length
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def release(self, path, fi):
        self.handles.pop(fi.fh, None)
        return 0

    @mfusepy.overrides(mfusepy.Operations)
    def unlink(self, path):
        self._node(path)
        self._remove(path)
        return 0

    def _remove(self, path: str) -> None:
        parent, _, name = path.rpartition("/")
        self.paths[parent or "/"].children.pop(name, None)  # type: ignore[union-attr]
        del self.paths[path]


def add_timeouts_option(ap: argparse.ArgumentParser) -> None:
    """``--timeouts E,A,N``: the kernel cache timeouts (s) a filesystem sets at init (shared with
    ``passthroughfs.py``); read them back with :func:`parse_timeouts`."""
    ap.add_argument(
        "--timeouts",
        default="1,1,1",
        metavar="E,A,N",
        help="kernel cache timeouts in seconds: entry, attribute, negative lookup",
    )


def parse_timeouts(ap: argparse.ArgumentParser, spec: str) -> tuple[float, float, float]:
    """``"E,A,N"`` → three floats (seconds); exits through ``ap.error`` otherwise."""
    timeouts = tuple(float(x) for x in spec.split(","))
    if len(timeouts) != 3:
        ap.error("--timeouts takes three numbers")
    return timeouts  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    """Mount a :class:`MemFS` in the foreground; returns when unmounted."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mountpoint")
    ap.add_argument("--populate", type=int, default=0, metavar="N", help="entries to create before mounting")
    ap.add_argument("--section-entries", type=int, default=1000)
    ap.add_argument("--entry-bytes", type=int, default=1024)
    add_timeouts_option(ap)
    a = ap.parse_args(argv)
    timeouts = parse_timeouts(ap, a.timeouts)
    fs = MemFS(timeouts)  # type: ignore[arg-type]
    if a.populate:
        fs.populate(a.populate, a.section_entries, a.entry_bytes)
    mfusepy.FUSE(
        fs,
        a.mountpoint,
        raw_fi=True,
        foreground=True,
        nothreads=True,
        fsname="memfs",
        subtype="memfs",
        default_permissions=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
