"""The cases of ../shared/cases/POSIX.md that are file API behaviour, each run in process on the view and
through a real mount (fixture ``d``: a driver of tests/helpers/fs_drivers.py), with the expected values the
cases give. The mount driver shares one mount (no indexer: these cases are about the filesystem) per module;
each case works in its own directory of it. The view driver gets a new store per case, checked after it.

What needs the kernel's caches, the indexer, real shell tools, other users, concurrency, a crash or a full
disk stays in tests/mount/test_posix_cases.py (C02's store-side append behind the kernel, C04 ``sed -i``,
C05 ``perl``/``rm -rf``, C06 ``touch``, C07/C08/C11/C16/C18 with the indexer, C12, C14, C15, C17's exec bit
and other users, C19 ``cp -a``/``mv`` across filesystems, C20 ``df``, C21 ``dd``/``cp --sparse``, C23,
C25, C26).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import time

import pytest
from helpers.fs_drivers import NOW, OMIT, MountDriver, ViewDriver
from helpers.mount import check_store, mount

from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

W, RW = os.O_WRONLY, os.O_RDWR
CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


_case = itertools.count(1)


@pytest.fixture(scope="module")
def posix_mount(tmp_path_factory):
    """One mount without an indexer for every mount-driver case of a module."""
    base = tmp_path_factory.mktemp("posix-mount")
    Store.create(base / "lib", {"toc_max_tokens": 2000}).close()
    with mount(base / "lib", base / "mnt", indexer=False) as m:
        yield m


@pytest.fixture(params=["view", pytest.param("mount", marks=pytest.mark.mount)])
def d(request, tmp_path):
    """A driver (``ViewDriver`` or ``MountDriver``) rooted at a fresh directory ``/case-N``."""
    root = b"/case-%d" % next(_case)
    if request.param == "mount":
        m = request.getfixturevalue("posix_mount")
        yield MountDriver(os.fsencode(m.mnt) + root)
        return
    st = Store.create(tmp_path / "lib", {"toc_max_tokens": 2000})
    try:
        yield ViewDriver(LibraryView(st), root)
    finally:
        st.close()
    check_store(str(tmp_path / "lib"))


def write_file(d, rel: bytes, data: bytes, flags: int = CREATE, mode: int = 0o644) -> None:
    """Open with ``flags``, write ``data`` from offset 0 in 64 KiB pieces, close."""
    fh = d.open(rel, flags, mode)
    try:
        for off in range(0, len(data), 1 << 16):
            d.pwrite(fh, data[off : off + (1 << 16)], off)
    finally:
        d.close(fh)


def read_file(d, rel: bytes) -> bytes:
    """The whole content of ``rel``."""
    fh = d.open(rel, os.O_RDONLY)
    try:
        out = b""
        while chunk := d.pread(fh, 1 << 16, len(out)):
            out += chunk
        return out
    finally:
        d.close(fh)


def errno_of(fn, *args) -> int | None:
    """The errno ``fn(*args)`` fails with, None if it succeeds."""
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return None


def test_c01_overwrite_and_truncate_through_a_handle(d):
    write_file(d, b"t.md", b"line one is long\nline two\n")
    write_file(d, b"t.md", b"short\n", W | os.O_TRUNC)  # `cat > t.md <<EOF`
    assert read_file(d, b"t.md") == b"short\n"
    fh = d.open(b"t.md", RW)
    d.pwrite(fh, b"abcdef", 0)
    d.ftruncate(fh, 3)
    d.close(fh)
    fh = d.open(b"t.md", RW)
    d.ftruncate(fh, 10)
    d.close(fh)
    assert read_file(d, b"t.md") == b"abc" + b"\0" * 7
    assert d.stat(b"t.md")["st_size"] == 10


def test_c02_append_writes_at_the_real_end(d):
    write_file(d, b"a.md", b"first line\n")
    write_file(d, b"a.md", b"second\n", W | os.O_APPEND)
    assert read_file(d, b"a.md") == b"first line\nsecond\n"
    write_file(d, b"b.md", b"x" * 5000)
    write_file(d, b"b.md", b"END\n", W | os.O_APPEND)
    assert read_file(d, b"b.md")[-4:] == b"END\n" and d.stat(b"b.md")["st_size"] == 5004
    # an appender opened before another writer grew the file still writes at the end
    appender = d.open(b"a.md", W | os.O_APPEND)
    write_file(d, b"a.md", b"Z\n", W | os.O_APPEND)
    d.pwrite(appender, b"third\n", 0)
    d.close(appender)
    assert read_file(d, b"a.md") == b"first line\nsecond\nZ\nthird\n"


def test_c03_atomic_replace_by_rename(d):
    write_file(d, b"n.md", b"old\n")
    reader = d.open(b"n.md", os.O_RDONLY)  # a reader that already has n.md open
    try:
        write_file(d, b"n.md.tmp", b"new\n")
        d.rename(b"n.md.tmp", b"n.md")  # os.replace
        assert read_file(d, b"n.md") == b"new\n"
        assert b"n.md.tmp" not in d.listdir()
        write_file(d, b"n2.tmp", b"v2\n")
        d.rename(b"n2.tmp", b"n.md")  # mv -f
        assert read_file(d, b"n.md") == b"v2\n"
        assert d.pread(reader, 100, 0) == b"old\n"  # keeps reading the old bytes
    finally:
        d.close(reader)
    assert errno_of(d.rename, b"n.md", b"nonexistent/x.md") == errno.ENOENT
    assert read_file(d, b"n.md") == b"v2\n"


def test_c04_sed_in_place_sequence(d):
    """What ``sed -i`` does: O_EXCL temp file 0600, write, fchmod to the original's mode, rename over it."""
    write_file(d, b"s.md", b"alpha\nbeta\n")
    d.chmod(b"s.md", 0o644)
    fh = d.open(b"sedAbC123", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    d.pwrite(fh, b"alpha\ngamma\n", 0)
    d.fchmod(fh, stat.S_IMODE(d.stat(b"s.md")["st_mode"]))
    d.close(fh)
    d.rename(b"sedAbC123", b"s.md")
    assert read_file(d, b"s.md") == b"alpha\ngamma\n"
    assert stat.S_IMODE(d.stat(b"s.md")["st_mode"]) == 0o644
    assert [n for n in d.listdir() if n.startswith(b"sed")] == []


def test_c05_big_directory_lists_every_entry_once_and_removes(d):
    d.mkdir(b"big")
    names = [b"n%05d.md" % i for i in range(1, 3001)]
    for n in names:
        d.close(d.open(b"big/" + n, os.O_WRONLY | os.O_CREAT))
    listed = d.listdir(b"big")
    assert len(listed) == 3000 and sorted(listed) == names  # no entry lost or repeated past a full buffer
    d.mkdir(b"t")
    d.mkdir(b"t/a")
    d.mkdir(b"t/a/b")
    assert d.stat(b"t/a")["st_nlink"] in (1, 3)  # 1 ("unknown") or 2 + subdirectories
    for n in names:
        d.unlink(b"big/" + n)
    d.rmdir(b"big")
    assert b"big" not in d.listdir()


def test_c06_times_now_omit_and_exact(d):
    write_file(d, b"ts.md", b"x\n")
    before_s = time.time()
    d.utime(b"ts.md", NOW, NOW)  # touch
    assert before_s - 1 <= d.stat(b"ts.md")["st_mtime_ns"] / 1e9 <= time.time() + 1
    t2020 = 1577934245 * 10**9  # 2020-01-02 03:04:05 UTC
    d.utime(b"ts.md", t2020, t2020)
    d.utime(b"ts.md", NOW, OMIT)  # touch -a leaves mtime alone
    st = d.stat(b"ts.md")
    assert st["st_mtime_ns"] == t2020 and st["st_atime_ns"] > t2020
    t2021 = 1622505600 * 10**9  # 2021-06-01 00:00:00 UTC
    d.utime(b"ts.md", OMIT, t2021)  # touch -m leaves atime alone
    st2 = d.stat(b"ts.md")
    assert st2["st_mtime_ns"] == t2021 and st2["st_atime_ns"] == st["st_atime_ns"]
    d.utime(b"ts.md", 10**18, 2 * 10**18)
    assert d.stat(b"ts.md")["st_mtime_ns"] == 2 * 10**18


def test_c07_directory_rename(d):
    d.mkdir(b"p")
    d.mkdir(b"p/q")
    write_file(d, b"p/q/f.md", b"1\n")
    write_file(d, b"p/g.md", b"2\n")
    d.rename(b"p", b"p2")
    assert read_file(d, b"p2/q/f.md") + read_file(d, b"p2/g.md") == b"1\n2\n"
    assert errno_of(d.stat, b"p") == errno.ENOENT
    d.mkdir(b"e")
    d.rename(b"p2", b"e")  # onto an empty directory: replaces it
    assert d.listdir(b"e/q") == [b"f.md"]
    d.mkdir(b"full")
    d.mkdir(b"full/x")
    d.mkdir(b"src")
    assert errno_of(d.rename, b"src", b"full") == errno.ENOTEMPTY
    assert d.listdir(b"full") == [b"x"] and d.listdir(b"src") == []


def test_c08_odd_names_name_max_and_long_paths(d):
    odd = [b"with space.md", b"nl\nname", "日本語 ✅.md".encode(), b"caf\xe9.md"]  # the last is not UTF-8
    for n in odd:
        write_file(d, n, n)
    assert set(odd) <= set(d.listdir())
    assert all(read_file(d, n) == n for n in odd)
    assert errno_of(write_file, d, "飞".encode() * 85 + b".md", b"") == errno.ENAMETOOLONG  # 258 bytes
    assert errno_of(write_file, d, b"c" * 256, b"") == errno.ENAMETOOLONG
    write_file(d, b"a" * 255, b"")
    assert b"a" * 255 in d.listdir()
    path = b""
    for _ in range(3):
        path += (b"/" if path else b"") + b"b" * 200
        d.mkdir(path)
    write_file(d, path + b"/f.md", b"ok\n")  # a path of more than 600 bytes
    assert read_file(d, path + b"/f.md") == b"ok\n"


def test_c11_unlink_while_open(d):
    d.mkdir(b"ul")
    write_file(d, b"ul/t.md", b"keep me")
    fh = d.open(b"ul/t.md", RW)
    d.unlink(b"ul/t.md")
    assert d.pread(fh, 100, 0) == b"keep me" and d.fstat(fh)["st_size"] == 7
    d.pwrite(fh, b"!", 7)
    d.ftruncate(fh, 4)
    d.fchmod(fh, 0o600)
    assert d.fstat(fh)["st_size"] == 4
    d.close(fh)
    assert d.listdir(b"ul") == []  # no .fuse_hidden left behind
    d.rmdir(b"ul")


def test_c12_exclusive_create(d):
    excl = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    d.close(d.open(b"lock", excl))
    assert errno_of(d.open, b"lock", excl) == errno.EEXIST
    d.close(d.open(b"lock", os.O_CREAT | os.O_WRONLY))  # plain O_CREAT opens the existing file
    write_file(d, b"shared.md", b"0\n", os.O_CREAT | os.O_WRONLY | os.O_APPEND)
    write_file(d, b"shared.md", b"1\n", os.O_CREAT | os.O_WRONLY | os.O_APPEND)
    assert read_file(d, b"shared.md") == b"0\n1\n"


def test_c17_modes(d):
    write_file(d, b"s.sh", b"#!/bin/sh\necho ran\n")
    d.chmod(b"s.sh", 0o755)
    assert stat.S_IMODE(d.stat(b"s.sh")["st_mode"]) == 0o755
    d.chmod(b"s.sh", 0o600)
    assert stat.S_IMODE(d.stat(b"s.sh")["st_mode"]) == 0o600
    d.mkdir(b"priv", 0o700)
    assert stat.S_IMODE(d.stat(b"priv")["st_mode"]) == 0o700


def test_c18_symlinks_and_hard_links(d):
    write_file(d, b"target.md", b"t\n")
    d.symlink(b"target.md", b"rel.md")
    assert d.readlink(b"rel.md") == b"target.md" and stat.S_ISLNK(d.stat(b"rel.md")["st_mode"])
    d.mkdir(b"sub")
    d.symlink(b"../target.md", b"sub/up.md")
    assert d.readlink(b"sub/up.md") == b"../target.md"
    d.link(b"target.md", b"hard.md")
    assert d.stat(b"target.md")["st_nlink"] == d.stat(b"hard.md")["st_nlink"] == 2
    assert read_file(d, b"hard.md") == b"t\n"
    d.symlink(b"/etc/passwd", b"escape.md")  # stored as a link, never followed by the library itself
    assert d.readlink(b"escape.md") == b"/etc/passwd"


def test_c19_xattrs(d):
    write_file(d, b"x.md", b"h\n")
    assert errno_of(d.getxattr, b"x.md", b"user.nope") == errno.ENODATA
    d.setxattr(b"x.md", b"user.k", b"v")
    assert d.getxattr(b"x.md", b"user.k") == b"v"


def test_c20_statvfs(d):
    s = d.statvfs()
    assert s["f_bsize"] > 0 and s["f_bavail"] > 0 and s["f_namemax"] == 255


@pytest.mark.parametrize("size", [3_000_000])
def test_c21_offsets_holes_large_files(d, size):
    big = os.urandom(size)
    write_file(d, b"big.bin", big)
    assert read_file(d, b"big.bin") == big
    fh = d.open(b"big.bin", W)
    d.pwrite(fh, b"XY", 1000)
    d.close(fh)
    fh = d.open(b"big.bin", os.O_RDONLY)
    assert d.pread(fh, 2, 1000) == b"XY"
    d.close(fh)
    write_file(d, b"sp", b"")
    d.truncate(b"sp", 10 << 20)
    fh = d.open(b"sp", W)
    d.pwrite(fh, b"Z", 5_000_000)
    d.close(fh)
    fh = d.open(b"sp", os.O_RDONLY)
    assert d.pread(fh, 3, 4_999_999) == b"\0Z\0"
    d.close(fh)
    assert d.stat(b"sp")["st_size"] == 10 << 20
