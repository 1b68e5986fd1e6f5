"""POSIX details that tools notice (issue 14): each operation runs on the mount and on a local directory
(tmpfs ``/dev/shm`` where it exists, else the test's tmp dir) in the same test, and the results are compared.

1. shared ``mmap`` of ``INDEX.md`` (and of regular files: read, shared write + ``msync``), and fresh TOC
   bytes after the indexer rewrote a page;
2. ``.`` and ``..`` in ``readdir`` with their real inode numbers (``ls -a`` of an empty directory);
3. ``st_blocks`` from the allocated chunks (``du`` of a sparse file);
4. ``fallocate`` (mode 0, ``FALLOC_FL_KEEP_SIZE``, ``posix_fallocate``, ``PUNCH_HOLE``; others EOPNOTSUPP);
5. ``stat`` of a hard link's other name right after ``unlink``/``chmod`` (no stale attribute cache).

System packages: coreutils (ls, du, stat), util-linux (fallocate).
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import subprocess
import tempfile

import pytest
from helpers.facility import unavailable
from helpers.files import read_file
from helpers.wait import wait_until

MiB = 1 << 20


@pytest.fixture
def local(tmp_path):
    """A directory on tmpfs (``/dev/shm``) when there is one, else on the tmp dir's filesystem."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    d = tempfile.mkdtemp(prefix="posix-ref-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def both(mounted, local: str, sub: str) -> tuple[str, str]:
    """A fresh subdirectory ``sub`` in the mount and in the local reference directory."""
    m, r = mounted.p(sub), os.path.join(local, sub)
    os.mkdir(m)
    os.mkdir(r)
    return m, r


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"), timeout=60)


def ls_ai(d: str) -> dict[str, int]:
    """``ls -ai`` of ``d``: name → inode number (what readdir(3) returned, dots included)."""
    r = run("ls", "-ai1", d)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        ino, name = line.strip().split(" ", 1)
        out[name] = int(ino)
    return out


# ---- 1. mmap ------------------------------------------------------------------------------------------------
def mmap_read(path: str) -> bytes:
    """The whole file through a shared read-only mapping (MAP_SHARED, PROT_READ: what tools use)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return bytes(mm[:])


def mmap_write(path: str, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` through a shared writable mapping and ``msync`` it."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE) as mm:
        mm[offset : offset + len(data)] = data
        mm.flush()


def test_shared_mmap_of_index_md_and_regular_files(mounted, local):
    m, r = both(mounted, local, "mm")
    for d in (m, r):
        with open(os.path.join(d, "a.md"), "wb") as f:
            f.write(b"# A\n" + bytes(range(256)) * 64)
    mounted.wait_indexed()
    toc = os.path.join(m, "INDEX.md")
    page = read_file(toc, "rb")
    assert b"a.md" in page
    assert mmap_read(toc) == page  # was ENODEV: generated files were served with direct_io
    # regular files: read, then a shared write + msync, seen by a new descriptor; same on tmpfs
    results = []
    for d in (m, r):
        p = os.path.join(d, "a.md")
        before = mmap_read(p)
        mmap_write(p, 4, b"MAPPED")
        after = read_file(p, "rb")
        results.append((before[:8], after[:12], len(after), mmap_read(p) == after))
    assert results[0] == results[1]
    assert results[0][1] == b"# A\nMAPPED\x06\x07"
    # the indexer rewrites the TOC: a new open (read or mmap) shows the new page, stat agrees with it
    stat_before = os.stat(toc).st_size
    with open(os.path.join(m, "b-added-later.md"), "w") as f:
        f.write("# B\n")
    mounted.wait_indexed()
    for read in (lambda p: read_file(p, "rb"), mmap_read):
        page2 = read(toc)
        assert b"b-added-later.md" in page2 and page2 != page
        assert os.stat(toc).st_size == len(page2) != stat_before


def test_control_files_and_toc_pages_read_whole_after_changes(mounted):
    """Sizes the kernel cached must never cut a read short: ``status.json`` changes size all the time."""
    import json

    d = mounted.p("ctl")
    os.mkdir(d)
    status = mounted.p(".libraryfs/status.json")
    for k in range(5):
        json.loads(read_file(status, "rb"))
        with open(os.path.join(d, f"f{k}.md"), "w") as f:
            f.write("x" * (k + 1))
        json.loads(read_file(status, "rb"))


# ---- 2. dots --------------------------------------------------------------------------------------------------
def test_ls_a_shows_dot_and_dotdot_with_their_inodes(mounted, local):
    m, r = both(mounted, local, "empty")
    for d, parent in ((m, mounted.mnt), (r, local)):
        entries = ls_ai(d)
        assert entries["."] == os.stat(d).st_ino, (d, entries)
        assert entries[".."] == os.stat(parent).st_ino, (d, entries)
    assert set(ls_ai(r)) == {".", ".."}
    assert set(ls_ai(m)) == {".", ".."}  # the generated TOC is resolvable, never listed (docs/posix.md)
    toc = os.path.join(m, "INDEX.md")
    wait_until(lambda: os.path.exists(toc), 30, "the new directory to settle")  # `cat INDEX.md` works
    assert set(ls_ai(m)) == {".", ".."}
    root = ls_ai(mounted.mnt)
    assert root["."] == os.stat(mounted.mnt).st_ino
    # the mount's root says its `..` is itself (as tmpfs); ls shows the mountpoint's parent, as for tmpfs
    assert root[".."] == os.stat(os.path.dirname(mounted.mnt)).st_ino
    ctl = ls_ai(mounted.p(".libraryfs"))
    assert ctl["."] == os.stat(mounted.p(".libraryfs")).st_ino and ctl[".."] == root["."]


# ---- 3. du ----------------------------------------------------------------------------------------------------
def test_du_counts_allocated_blocks_not_holes(mounted, local):
    m, r = both(mounted, local, "du")
    seen = []
    for d in (m, r):
        sparse, dense = os.path.join(d, "sparse"), os.path.join(d, "dense")
        with open(sparse, "wb") as f:
            f.truncate(1 << 30)
            f.write(b"x")
        with open(dense, "wb") as f:
            f.write(b"y" * MiB)
        du = run("du", "-k", sparse, dense)
        assert du.returncode == 0, du.stderr
        kib = [int(line.split()[0]) for line in du.stdout.splitlines()]
        blocks = [os.stat(sparse).st_blocks, os.stat(dense).st_blocks]
        with open(dense, "r+b") as f:
            f.truncate(100_000)
        blocks.append(os.stat(dense).st_blocks)
        seen.append((kib, blocks))
    assert seen[0] == seen[1] == ([4, 1024], [8, 2048, 200])


# ---- 4. fallocate ---------------------------------------------------------------------------------------------
def test_fallocate_modes(mounted, local):
    if shutil.which("fallocate") is None:
        unavailable("fallocate is missing (apt-get install util-linux)")
    m, r = both(mounted, local, "fa")
    seen = []
    for d in (m, r):
        f = os.path.join(d, "f")
        steps = [run("fallocate", "-l", "1MiB", f).returncode, os.stat(f).st_size]
        steps += [run("fallocate", "-n", "-l", "4MiB", f).returncode, os.stat(f).st_size]
        steps += [run("fallocate", "-o", "512KiB", "-l", "1MiB", f).returncode, os.stat(f).st_size]
        fd = os.open(f, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 3 * MiB)
            steps.append(os.fstat(fd).st_size)
        finally:
            os.close(fd)
        collapse = run("fallocate", "-c", "-o", "0", "-l", "64KiB", f)  # FALLOC_FL_COLLAPSE_RANGE
        steps.append((collapse.returncode, "Operation not supported" in collapse.stderr))
        steps.append(read_file(f, "rb") == bytes(3 * MiB))
        seen.append(steps)
    assert seen[0] == seen[1] == [0, MiB, 0, MiB, 0, 1536 * 1024, 3 * MiB, (1, True), True]
    # FALLOC_FL_PUNCH_HOLE | KEEP_SIZE: the range reads as zeros and blocks are freed (tmpfs frees whole 4 KiB
    # pages inside the range, the mount whole 64 KiB chunks: the counts differ, both drop)
    punched = []
    for d in (m, r):
        h = os.path.join(d, "h")
        with open(h, "wb") as f:
            f.write(b"z" * (256 * 1024))
        before = os.stat(h).st_blocks
        p = run("fallocate", "-p", "-o", "64KiB", "-l", "100KiB", h)
        data = read_file(h, "rb")
        want = b"z" * 65536 + bytes(102400) + b"z" * (256 * 1024 - 65536 - 102400)
        punched.append((p.returncode, data == want, os.stat(h).st_size, os.stat(h).st_blocks < before))
    assert punched[0] == punched[1] == (0, True, 256 * 1024, True)
    g = os.path.join(m, "g")
    open(g, "wb").close()
    fd = os.open(g, os.O_RDWR)
    try:
        with pytest.raises(OSError) as ei:
            os.posix_fallocate(fd, 0, 1 << 52)  # past the largest file size
        assert ei.value.errno in (errno.EFBIG, errno.ENOSPC)
    finally:
        os.close(fd)
    # generated files that stay generated are read-only (INDEX.md is not: writing it makes it the user's)
    r2 = run("fallocate", "-l", "1MiB", mounted.p(".libraryfs/status.json"))
    assert r2.returncode != 0 and "Permission denied" in r2.stderr


# ---- 5. hard links and the attribute cache ---------------------------------------------------------------------
@pytest.mark.no_indexer
def test_stat_of_other_name_is_fresh_after_unlink_and_chmod(mounted, local):
    m, r = both(mounted, local, "ln")
    seen = []
    for d in (m, r):
        a, b, c = (os.path.join(d, n) for n in ("a", "b", "c"))
        with open(a, "w") as f:
            f.write("a")
        os.link(a, b)
        os.link(a, c)
        row = [os.stat(b).st_nlink, os.stat(c).st_nlink]
        os.chmod(a, 0o600)
        row.append(oct(os.stat(b).st_mode & 0o777))
        os.unlink(a)
        row += [os.stat(b).st_nlink, os.stat(c).st_nlink]
        os.unlink(c)
        row.append(os.stat(b).st_nlink)
        seen.append(row)
    assert seen[0] == seen[1] == [3, 3, "0o600", 2, 2, 1]


# ---- 6. sparse files: lseek SEEK_DATA / SEEK_HOLE and cp --sparse ------------------------------------------------
GiB = 1 << 30
BIG = 20 * GiB  #: the fresh-user trial's `truncate -s 20G` (sparse on both sides: no space used)
#: (offset, bytes) written into the big file: inside a page, across pages, across a 64 KiB chunk boundary, far
#: out, and up to the end of file (no hole before EOF)
WRITES = [
    (0, b"head"),
    (MiB + 100, b"a" * 5000),
    (10 * 65536 - 10, b"b" * 20),
    (5 * GiB + 12345, b"mid"),
    (BIG - 3, b"end"),
]


def seek(path: str, offset: int, whence: int) -> int | str:
    """``lseek(fd, offset, whence)`` on a fresh descriptor: the offset, or the errno's name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, offset, whence)
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        os.close(fd)


def extents(path: str) -> list[tuple[int, int]]:
    """The data extents ``[start, end)`` found by alternating SEEK_DATA and SEEK_HOLE from 0 (as cp does)."""
    out, pos = [], 0
    while True:
        lo = seek(path, pos, os.SEEK_DATA)
        if not isinstance(lo, int):
            return out
        hi = seek(path, lo, os.SEEK_HOLE)
        assert isinstance(hi, int) and hi > lo, (path, lo, hi)
        out.append((lo, hi))
        pos = hi


def probes() -> list[int]:
    """Offsets to ask from: around every write, page and chunk edges, the end of file and past it."""
    out = {0, 1, 4095, 4096, 65535, 65536, BIG - 1, BIG, BIG + 1, BIG + GiB}
    for off, data in WRITES:
        for p in (off - 4097, off - 1, off, off + 1, off + len(data) - 1, off + len(data), off + 4096):
            out.add(max(p, 0))
    return sorted(out)


def test_seek_data_and_hole_of_a_sparse_file_equal_tmpfs(mounted, local):
    m, r = both(mounted, local, "sp")
    seen = []
    for d in (m, r):
        big, hole, empty = (os.path.join(d, n) for n in ("big.img", "hole.img", "empty"))
        assert run("truncate", "-s", "20G", big).returncode == 0
        with open(big, "r+b") as f:
            for off, data in WRITES:
                f.seek(off)
                f.write(data)
        assert run("truncate", "-s", "20G", hole).returncode == 0
        open(empty, "wb").close()
        answers = [(p, seek(big, p, os.SEEK_DATA), seek(big, p, os.SEEK_HOLE)) for p in probes()]
        answers += [(p, seek(hole, p, os.SEEK_DATA), seek(hole, p, os.SEEK_HOLE)) for p in (0, 4096, BIG)]
        answers += [(0, seek(empty, 0, os.SEEK_DATA), seek(empty, 0, os.SEEK_HOLE))]
        seen.append((answers, extents(big), extents(hole)))
    assert seen[0] == seen[1]
    assert (
        seen[0][2] == [] and seen[0][1][-1][1] == BIG
    )  # the pure hole has no data; the big file ends in data


def test_cp_sparse_always_of_a_20_gib_sparse_file(mounted, local):
    m = mounted.p("cp")
    os.mkdir(m)
    src = os.path.join(m, "sparse.img")
    assert run("truncate", "-s", "20G", src).returncode == 0
    with open(src, "r+b") as f:
        for off, data in WRITES:
            f.seek(off)
            f.write(data)
    want = extents(src)
    for dst in (os.path.join(local, "copy.img"), os.path.join(m, "copy.img")):  # off the mount, and onto it
        cp = run("cp", "--sparse=always", src, dst)
        assert cp.returncode == 0, cp.stderr
        st = os.stat(dst)
        assert st.st_size == BIG and st.st_blocks * 512 < 4 * MiB  # sparse: a few pages, not 20 GiB
        assert extents(dst) == want
        with open(dst, "rb") as f:  # equal: the same data extents with the same bytes (the rest reads zeros)
            for off, data in WRITES:
                f.seek(off)
                assert f.read(len(data)) == data
            for lo, hi in want:
                f.seek(lo)
                chunk = f.read(hi - lo)
                with open(src, "rb") as g:
                    g.seek(lo)
                    assert chunk == g.read(hi - lo)
